//! The image branch of a batch: an image file (`.png`, `.jpg`, `.gif`, `.webp`) is one call to
//! the image model; its answer is decoded, checked to be a real image, and shaped to the size and
//! format asked for ([`super::image`]) off the async threads, since decoding is CPU-bound.

use std::time::Instant;

use crate::audit::Selection;
use crate::model::{CallPurpose, ChatMessage, ChatRequest, ErrorClass, ModelClient};
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::fanout;
use crate::synthesis::image::{self, ImageError, ImageFormat, ImageTarget, decode_data_url};
use crate::synthesis::progress::Event;
use crate::synthesis::prompt::quote as prompt_quote;
use crate::synthesis::stage::{Chosen, Content, FileCx, Produced, SynthesisConfig};

/// One image file's content from the image model, or why there is none.
pub(crate) async fn generate_image(
    models: &dyn ModelClient,
    config: &SynthesisConfig,
    cx: FileCx<'_>,
) -> Produced {
    let FileCx { batch, sink, .. } = cx;
    let file = cx.file();
    let Some(model) = batch
        .options()
        .image_model
        .clone()
        .or_else(|| config.image_model.clone())
    else {
        return Produced::failed(
            "no image model is configured: set IMAGE_MODEL (or send options.image_model)",
            Vec::new(),
        );
    };
    let target = file.image.unwrap_or(ImageTarget {
        size: None,
        format: file
            .path
            .extension()
            .and_then(|e| ImageFormat::from_extension(&e))
            .unwrap_or(ImageFormat::Png),
    });
    let req = ChatRequest {
        model: model.clone(),
        messages: vec![ChatMessage::user(image_prompt(batch, file, target))],
        modalities: Some(vec!["image".into(), "text".into()]),
        urgent: batch.resumed(),
        purpose: CallPurpose::Image,
        ..ChatRequest::default()
    };
    sink.emit(Event::CandidateStarted {
        file: file.path.to_string(),
        model: model.clone(),
    });
    let started = Instant::now();
    let (record, chosen) = match models.chat(req).await {
        Ok(resp) => {
            let mut record = fanout::answered(&model, &resp);
            let url = resp.images.into_iter().next();
            let shaped = tokio::task::spawn_blocking(move || {
                url.ok_or(ImageError::Missing)
                    .and_then(|url| decode_data_url(&url))
                    .and_then(|bytes| image::shape(&bytes, target))
            })
            .await
            .unwrap_or_else(|e| {
                Err(ImageError::Broken(
                    target.format.as_str(),
                    format!("the decoder stopped: {e}"),
                ))
            });
            match shaped {
                Ok(img) => {
                    record.ok = true;
                    record.parsed = Some(true);
                    let chosen = Chosen {
                        content: Content::Image(img),
                        model: model.clone(),
                        selection: Selection::SingleCandidate,
                        reason: None,
                        formatted: None,
                    };
                    (record, Ok(chosen))
                }
                Err(e) => {
                    record.parsed = Some(false);
                    record.error_class = Some(ErrorClass::BadImage);
                    record.error = Some(e.to_string());
                    (record, Err(format!("'{}': {e}", file.path)))
                }
            }
        }
        Err(e) => {
            let record = fanout::failed(&model, started, &e);
            (record, Err(format!("the image model failed: {e}")))
        }
    };
    sink.emit(Event::CandidateFinished {
        file: file.path.to_string(),
        model,
        latency_ms: record.latency_ms,
        ok: record.ok,
        error_class: record.error_class,
        parsed: record.parsed,
    });
    Produced {
        chosen,
        candidates: vec![record],
        validation: None,
        existing: None,
    }
}

fn image_prompt(batch: &Batch, file: &FileSpec, target: ImageTarget) -> String {
    let mut ask = format!(
        "Create the image {}: {}",
        prompt_quote(file.path.as_str()),
        file.description.trim()
    );
    if let Some((w, h)) = target.size {
        ask.push_str(&format!("\nSize: {w}×{h} pixels."));
    }
    ask.push_str(&format!("\nFormat: {}.", target.format.as_str()));
    if let Some(task) = &batch.task_description() {
        ask.push_str(&format!("\nIt is part of this task: {}", task.trim()));
    }
    ask
}
