//! Image files in a batch: routed to the image model, checked, shaped, written and audited.

use std::io::Cursor;

use base64::Engine;
use serde_json::json;
use writ_fake_upstream::{Script, Step};
use writ_tests::{ARBITER, Backend, MODELS, TestApp, on_both_backends};

const PAINTER: &str = "paint/img";

fn data_url(format: image::ImageFormat, mime: &str, w: u32, h: u32) -> String {
    let img = image::RgbImage::from_pixel(w, h, image::Rgb([10, 120, 200]));
    let mut out = Cursor::new(Vec::new());
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut out, format)
        .unwrap();
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(out.into_inner())
    )
}

async fn app(backend: Backend) -> TestApp {
    writ_tests::spawn_app_with_models_and(backend, &[("IMAGE_MODEL", PAINTER)]).await
}

/// Images bigger than a file may be: a limit small enough for a test image to cross.
async fn app_with_small_files(backend: Backend) -> TestApp {
    writ_tests::spawn_app_with_models_and(
        backend,
        &[("IMAGE_MODEL", PAINTER), ("WRIT_MAX_FILE_BYTES", "4096")],
    )
    .await
}

async fn a_png_python_and_svg_batch_writes_each_the_right_way(app: TestApp) {
    // The image model answers a JPEG of the wrong size: writ converts and resizes it.
    app.fake().script(
        PAINTER,
        Script::always(Step::image(data_url(
            image::ImageFormat::Jpeg,
            "image/jpeg",
            300,
            200,
        ))),
    );
    for m in MODELS {
        app.fake().script(m, Script::always(Step::text("```python\nprint('hi')\n```\n```svg\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"8\" height=\"8\"><rect width=\"8\" height=\"8\"/></svg>\n```")));
    }
    app.fake()
        .script(ARBITER, Script::always(Step::verdict(1, "fine")));
    let body = json!({"command": "write_codebase", "files": [
        {"filename": "assets/logo.png", "code_description": "a blue square logo", "image": {"width": 64, "height": 48}},
        {"filename": "main.py", "code_description": "prints hi"},
        {"filename": "icon.svg", "code_description": "a small square icon"}]});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "success", "{answer}");
    assert_eq!(answer["image_files"], json!({"total": 1, "succeeded": 1}));
    assert_eq!(answer["code_files"], json!({"total": 2, "succeeded": 2}));
    let logo = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["filename"] == "assets/logo.png")
        .unwrap()
        .clone();
    assert_eq!(logo["kind"], "image");
    assert_eq!(
        logo["image"],
        json!({"width": 64, "height": 48, "format": "png", "model_width": 300, "model_height": 200, "model_format": "jpeg"})
    );

    let bytes = std::fs::read(app.repo_dir.join("assets/logo.png")).unwrap();
    assert_eq!(
        image::guess_format(&bytes).unwrap(),
        image::ImageFormat::Png
    );
    let decoded = image::load_from_memory(&bytes).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (64, 48));
    assert!(
        std::fs::read_to_string(app.repo_dir.join("icon.svg"))
            .unwrap()
            .starts_with("<svg")
    );
    assert_eq!(
        std::fs::read_to_string(app.repo_dir.join("main.py")).unwrap(),
        "print('hi')\n"
    );

    let call = &app.fake().calls_for(PAINTER)[0];
    assert_eq!(call.body["modalities"], json!(["image", "text"]));
    assert!(
        call.body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("64×48")
    );
    let (_, op) = app
        .json(&format!(
            "/operations/{}",
            logo["operation_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(op["kind"], "image");
    assert_eq!(op["detail"]["image"]["width"], 64);
    assert_eq!(op["detail"]["image"]["format"], "png");
    assert_eq!(op["sha256"], writ_core::content::sha256_hex(&bytes));
    assert!(
        op["content"].is_null() && op["content_base64"].is_string(),
        "the pixels are kept as bytes, not in the row's text"
    );
}

async fn broken_image_data_is_a_clear_per_file_error_and_writes_nothing(app: TestApp) {
    app.fake().script(
        PAINTER,
        Script::always(Step::image(
            "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB",
        )),
    );
    for m in MODELS {
        app.fake()
            .script(m, Script::always(Step::code("python", "ok = 1")));
    }
    let body = json!({"command": "write_codebase", "files": [
        {"filename": "logo.png", "code_description": "a logo"},
        {"filename": "ok.py", "code_description": "ok"}]});
    let (_, answer) = app.post_write_codebase(&body).await;
    assert_eq!(answer["status"], "partial_success", "{answer}");
    let logo = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["filename"] == "logo.png")
        .unwrap()
        .clone();
    assert_eq!(logo["success"], false);
    assert!(logo["error"].as_str().unwrap().contains("broken"), "{logo}");
    assert_eq!(logo["candidates"][0]["error_class"], "bad_image");
    assert!(!app.repo_dir.join("logo.png").exists());
    assert!(app.repo_dir.join("ok.py").exists());
}

/// A PNG of noise, which compresses to about its raw size.
fn noisy_png_data_url(w: u32, h: u32) -> String {
    let mut state: u32 = 0x9e37_79b9;
    let img = image::RgbImage::from_fn(w, h, |_, _| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let [a, b, c, _] = state.to_le_bytes();
        image::Rgb([a, b, c])
    });
    let mut out = Cursor::new(Vec::new());
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(out.into_inner())
    )
}

async fn an_image_above_the_file_size_limit_fails_its_file_and_writes_nothing(app: TestApp) {
    // 64×64 of noise is ~12 KiB as PNG; the limit in this app is 4 KiB.
    app.fake().script(
        PAINTER,
        Script::always(Step::image(noisy_png_data_url(64, 64))),
    );
    let body = json!({"command": "write_codebase", "files": [
        {"filename": "noise.png", "code_description": "static noise"}]});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    let result = &answer["results"][0];
    assert_eq!(result["success"], false, "{answer}");
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("WRIT_MAX_FILE_BYTES") && error.contains("4096"),
        "{error}"
    );
    assert!(app.files_on_disk().is_empty());
    // The same image under the limit is written: the limit, not the image, refused it.
    app.fake().script(
        PAINTER,
        Script::always(Step::image(noisy_png_data_url(16, 16))),
    );
    let (_, answer) = app.post_write_codebase(&body).await;
    assert_eq!(answer["results"][0]["success"], true, "{answer}");
}

/// A PNG whose header claims `w`×`h` pixels and holds none.
fn png_claiming(w: u32, h: u32) -> String {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let body: Vec<u8> = kind.iter().chain(data).copied().collect();
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(
        &mut png,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut png, b"IEND", &[]);
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

async fn an_image_claiming_huge_dimensions_is_refused_without_decoding_it(app: TestApp) {
    app.fake().script(
        PAINTER,
        Script::always(Step::image(png_claiming(10_000, 10_000))),
    );
    let body = json!({"command": "write_codebase", "files": [
        {"filename": "bomb.png", "code_description": "a picture"}]});
    let (status, answer) = app.post_write_codebase(&body).await;
    assert_eq!(status, 200, "{answer}");
    let result = &answer["results"][0];
    assert_eq!(result["success"], false, "{answer}");
    assert_eq!(
        result["candidates"][0]["error_class"], "bad_image",
        "{answer}"
    );
    // 10,000² RGBA is 400 MB, within the decoder's default allocation cap: only writ's own
    // dimension limit refuses it before any pixel buffer is allocated.
    let error = result["error"].as_str().unwrap();
    assert!(error.contains("limit"), "{error}");
    assert!(app.files_on_disk().is_empty());
}

async fn bad_image_options_are_refused_before_any_model_is_called(app: TestApp) {
    for (opts, field) in [
        (json!({"width": 5, "height": 64}), "files[0].image.width"),
        (json!({"format": "gif"}), "files[0].image.format"),
        (json!({"height": 64}), "files[0].image.width"),
    ] {
        let body = json!({"command": "write_codebase", "files": [{"filename": "a.png", "code_description": "x", "image": opts}]});
        let (status, answer) = app.post_write_codebase(&body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], field);
    }
    assert!(app.fake().calls().is_empty());
}

/// Code files are checked (and read) together in one step and image files beside them; the
/// refusal still names the first refused file in the batch's order, whichever kind it is.
async fn a_refused_target_is_the_first_in_the_batchs_order_whatever_its_kind(app: TestApp) {
    std::fs::create_dir_all(app.repo_dir.join("art.png")).unwrap();
    std::fs::create_dir_all(app.repo_dir.join("later.py")).unwrap();
    let image = json!({"filename": "art.png", "code_description": "a logo", "image": {"width": 16, "height": 16}});
    let code = json!({"filename": "later.py", "code_description": "a module"});
    let fine = json!({"filename": "ok.py", "code_description": "prints hi"});
    for (files, field) in [
        (json!([fine, image, code]), "files[1].filename"),
        (json!([fine, code, image]), "files[1].filename"),
        (json!([image, fine, code]), "files[0].filename"),
        (json!([code, fine, image]), "files[0].filename"),
    ] {
        let body = json!({"command": "write_codebase", "files": files});
        let (status, answer) = app.post_write_codebase(&body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }
    assert!(app.fake().calls().is_empty(), "refused before any model");
    assert!(!app.repo_dir.join("ok.py").exists());
}

// Every test runs on both backends: each records its batch, its files' operations and, for
// a refusal, nothing, and those records are what differ between the stores.
on_both_backends!(app app:
    a_png_python_and_svg_batch_writes_each_the_right_way,
    broken_image_data_is_a_clear_per_file_error_and_writes_nothing,
    an_image_claiming_huge_dimensions_is_refused_without_decoding_it,
    bad_image_options_are_refused_before_any_model_is_called,
    a_refused_target_is_the_first_in_the_batchs_order_whatever_its_kind,
);

/// Its own module: the tests above hold this file's `sqlite` and `postgres` modules.
mod small_files {
    use super::*;
    on_both_backends!(app app_with_small_files:
        an_image_above_the_file_size_limit_fails_its_file_and_writes_nothing
    );
}
