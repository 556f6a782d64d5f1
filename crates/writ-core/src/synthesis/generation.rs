//! Generation: one code file's prompt to every candidate model at once ([`super::fanout`]), each
//! answer checked as it arrives. What comes out is every candidate, viable or not, for
//! [`super::selection`] to choose among.

use writ_checks::Language;

use crate::audit::Operation;
use crate::content::sha256_hex;
use crate::model::ChatMessage;
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::fanout::{self, CallSettings, Candidate, UpstreamClock};
use crate::synthesis::progress::ProgressSink;
use crate::synthesis::prompt;
use crate::synthesis::run::Synthesizer;

/// A code file's candidates, with what selection needs to ask again (arbiter, fallback).
pub(crate) struct Generated {
    pub language: Language,
    /// The candidate models asked, in list order.
    pub models: Vec<String>,
    pub messages: Vec<ChatMessage>,
    /// One per model, in `models` order.
    pub answers: Vec<Candidate>,
}

impl Synthesizer {
    /// Reads the file's current content (checking `expected_sha256` before any model is called),
    /// builds its prompt and fans it out. An `Err` is the file's failure, with no model called.
    pub(crate) async fn generate(
        &self,
        batch: &Batch,
        file: &FileSpec,
        recent: &[Operation],
        sink: &dyn ProgressSink,
        upstream: &UpstreamClock,
    ) -> Result<Generated, String> {
        let language = Language::from_path(file.path.as_str());
        let current = self
            .workspace
            .read(&file.path)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(expected) = &file.expected_sha256 {
            let actual = current
                .as_deref()
                .map(sha256_hex)
                .unwrap_or_else(|| "absent".into());
            if &actual != expected {
                return Err(format!(
                    "'{}' changed: expected sha256 {expected}, found {actual}; no model was called",
                    file.path
                ));
            }
        }
        let current_text = current.as_deref().map(String::from_utf8_lossy);
        let messages =
            prompt::candidate_messages(batch, file, language, current_text.as_deref(), recent);
        let models = batch
            .options
            .models
            .clone()
            .unwrap_or_else(|| self.config.candidates.clone());
        let policy = batch.options.straggler.unwrap_or(self.config.straggler);
        let (answers, waited) = fanout::fan_out(
            self.models.as_ref(),
            &models,
            &messages,
            language,
            self.call_settings(),
            file.path.as_str(),
            sink,
            policy,
        )
        .await;
        upstream.add(waited);
        Ok(Generated {
            language,
            models,
            messages,
            answers,
        })
    }

    pub(crate) fn call_settings(&self) -> CallSettings {
        CallSettings {
            temperature: self.config.temperature,
            max_tokens: self.config.max_tokens,
        }
    }
}
