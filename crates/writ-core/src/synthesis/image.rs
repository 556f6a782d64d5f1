//! Image files: what the image model returned, checked and shaped into what was asked for.
//!
//! A model's answer is a data URL. Its bytes must really be an image of a known type (magic bytes,
//! then a full decode, so a truncated or lying answer is caught), and are then resized to the
//! requested size and re-encoded in the requested format when they differ, so the file written is
//! what was asked for whatever size the model chose.

use std::io::Cursor;

use base64::Engine;
use serde::{Deserialize, Serialize};

/// Largest side we produce; beyond it a request is refused before any model is called.
pub const MAX_SIDE: u32 = 4096;
/// Smallest side.
pub const MIN_SIDE: u32 = 16;
/// Largest decoded image accepted from a model (bytes of the data URL's payload).
pub const MAX_IMAGE_BYTES: usize = 32 * 1024 * 1024;
/// Largest side of an image writ will decode (a model's image may be larger than what is asked).
pub const MAX_DECODE_SIDE: u32 = 8192;
/// Most memory one decode may allocate: an 8192² RGBA image plus room for the resize.
pub const MAX_DECODE_ALLOC: u64 = 384 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageFormat {
    /// By file extension (`png`, `jpg`/`jpeg`, `gif`, `webp`).
    pub fn from_extension(ext: &str) -> Option<Self> {
        match ext.to_ascii_lowercase().as_str() {
            "png" => Some(Self::Png),
            "jpg" | "jpeg" => Some(Self::Jpeg),
            "gif" => Some(Self::Gif),
            "webp" => Some(Self::Webp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Jpeg => "jpeg",
            Self::Gif => "gif",
            Self::Webp => "webp",
        }
    }

    fn to_image(self) -> image::ImageFormat {
        match self {
            Self::Png => image::ImageFormat::Png,
            Self::Jpeg => image::ImageFormat::Jpeg,
            Self::Gif => image::ImageFormat::Gif,
            Self::Webp => image::ImageFormat::WebP,
        }
    }

    fn from_image(f: image::ImageFormat) -> Option<Self> {
        match f {
            image::ImageFormat::Png => Some(Self::Png),
            image::ImageFormat::Jpeg => Some(Self::Jpeg),
            image::ImageFormat::Gif => Some(Self::Gif),
            image::ImageFormat::WebP => Some(Self::Webp),
            _ => None,
        }
    }
}

/// `image` on a file descriptor or in `options.image`, as sent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ImageOptions {
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub format: Option<ImageFormat>,
}

/// What one image file must end up as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageTarget {
    /// Exact size, when asked for; otherwise the model's size is kept.
    pub size: Option<(u32, u32)>,
    pub format: ImageFormat,
}

/// The image written, and what was done to it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapedImage {
    pub bytes: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub format: ImageFormat,
    /// The model's own format and size.
    pub original_format: ImageFormat,
    pub original_size: (u32, u32),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("the model returned no image")]
    Missing,
    #[error("the model's image is not a base64 data URL: {0}")]
    NotDataUrl(String),
    #[error("the model's image is {0} bytes, more than the {MAX_IMAGE_BYTES} accepted")]
    TooLarge(usize),
    #[error("the model's data is not an image of a known type (png, jpeg, gif, webp)")]
    UnknownType,
    #[error("the model's {0} image is broken: {1}")]
    Broken(&'static str, String),
    #[error("could not encode the image as {0}: {1}")]
    Encode(&'static str, String),
}

/// The payload of a `data:image/...;base64,...` URL.
pub fn decode_data_url(url: &str) -> Result<Vec<u8>, ImageError> {
    let rest = url
        .trim()
        .strip_prefix("data:")
        .ok_or_else(|| ImageError::NotDataUrl("no data: prefix".into()))?;
    let (meta, payload) = rest
        .split_once(',')
        .ok_or_else(|| ImageError::NotDataUrl("no comma".into()))?;
    if !meta.ends_with(";base64") {
        return Err(ImageError::NotDataUrl("not base64".into()));
    }
    if payload.len() / 4 * 3 > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge(payload.len() / 4 * 3));
    }
    let clean: String = payload.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| ImageError::NotDataUrl(e.to_string()))
}

/// Checks that `bytes` are an image, then resizes and re-encodes it as `target` asks.
pub fn shape(bytes: &[u8], target: ImageTarget) -> Result<ShapedImage, ImageError> {
    let guessed = image::guess_format(bytes).map_err(|_| ImageError::UnknownType)?;
    let original_format = ImageFormat::from_image(guessed).ok_or(ImageError::UnknownType)?;
    // Explicit bounds instead of the decoder's defaults (no dimension cap, 512 MiB allocations):
    // a small hostile file must not make writ allocate gigabytes.
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_DECODE_SIDE);
    limits.max_image_height = Some(MAX_DECODE_SIDE);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = image::ImageReader::with_format(Cursor::new(bytes), guessed);
    reader.limits(limits);
    let decoded = reader
        .decode()
        .map_err(|e| ImageError::Broken(original_format.as_str(), e.to_string()))?;
    let original_size = (decoded.width(), decoded.height());
    let resized = match target.size {
        Some((w, h)) if (w, h) != original_size => {
            Some(decoded.resize_exact(w, h, image::imageops::FilterType::Lanczos3))
        }
        _ => None,
    };
    if resized.is_none() && target.format == original_format {
        return Ok(ShapedImage {
            bytes: bytes.to_vec(),
            width: original_size.0,
            height: original_size.1,
            format: original_format,
            original_format,
            original_size,
        });
    }
    let img = resized.unwrap_or(decoded);
    // JPEG has no alpha channel; the encoder refuses RGBA.
    let img = if target.format == ImageFormat::Jpeg {
        image::DynamicImage::ImageRgb8(img.to_rgb8())
    } else {
        img
    };
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, target.format.to_image())
        .map_err(|e| ImageError::Encode(target.format.as_str(), e.to_string()))?;
    Ok(ShapedImage {
        bytes: out.into_inner(),
        width: img.width(),
        height: img.height(),
        format: target.format,
        original_format,
        original_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbaImage::from_pixel(w, h, image::Rgba([200, 30, 30, 255]));
        let mut out = Cursor::new(Vec::new());
        image::DynamicImage::ImageRgba8(img)
            .write_to(&mut out, image::ImageFormat::Png)
            .unwrap();
        out.into_inner()
    }

    #[test]
    fn a_matching_image_is_kept_byte_for_byte() {
        let bytes = png(32, 32);
        let shaped = shape(
            &bytes,
            ImageTarget {
                size: Some((32, 32)),
                format: ImageFormat::Png,
            },
        )
        .unwrap();
        assert_eq!(shaped.bytes, bytes);
    }

    #[test]
    fn the_size_and_format_asked_for_are_enforced() {
        let shaped = shape(
            &png(64, 32),
            ImageTarget {
                size: Some((20, 40)),
                format: ImageFormat::Jpeg,
            },
        )
        .unwrap();
        assert_eq!((shaped.width, shaped.height), (20, 40));
        assert_eq!(shaped.format, ImageFormat::Jpeg);
        assert_eq!(
            image::guess_format(&shaped.bytes).unwrap(),
            image::ImageFormat::Jpeg
        );
        assert_eq!(shaped.original_size, (64, 32));
    }

    #[test]
    fn broken_and_foreign_data_are_refused() {
        let mut truncated = png(32, 32);
        truncated.truncate(40);
        assert!(matches!(
            shape(
                &truncated,
                ImageTarget {
                    size: None,
                    format: ImageFormat::Png
                }
            ),
            Err(ImageError::Broken(..))
        ));
        assert_eq!(
            shape(
                b"not an image at all",
                ImageTarget {
                    size: None,
                    format: ImageFormat::Png
                }
            ),
            Err(ImageError::UnknownType)
        );
    }

    #[test]
    fn data_urls_are_decoded_and_other_urls_refused() {
        let bytes = png(16, 16);
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        );
        assert_eq!(decode_data_url(&url).unwrap(), bytes);
        assert!(decode_data_url("https://example.com/a.png").is_err());
        assert!(decode_data_url("data:image/png,rawbytes").is_err());
    }
}
