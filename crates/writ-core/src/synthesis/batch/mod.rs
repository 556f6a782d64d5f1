//! The `write_codebase` request: its wire shape, and [`Batch`], the validated form.
//!
//! A `Batch` that exists is already 1–5 files, each with a path confined beneath the workspace, a non-empty
//! description, and no two files targeting the same path after normalisation; its options are
//! parsed (the straggler policy, model ids). Its fields are private to this crate, so no other
//! crate can build an invalid one. Every refusal names the field (`files[2].filename`) and the
//! limit.
//!
//! Here: the limits, [`Batch`] and [`FileSpec`] and the parsing of a request into them. The
//! wire types live in `request`, the parsed options in `options`; both are re-exported here.

mod context;
mod options;
mod request;
mod straggler;

pub use options::{
    DEFAULT_REPAIR_ROUNDS, DEFAULT_VALIDATION_TIMEOUT_SECS, Fanout, MAX_COMMAND_ARGS,
    MAX_VALIDATION_COMMANDS, Options, Validation,
};
pub use request::{
    BatchOptions, FanoutOptions, FileRequest, OnFail, StragglerOptions, ValidationOptions,
    WriteCodebaseRequest,
};

use crate::audit::FileKind;
use crate::path::RepoPath;
use crate::synthesis::image::{ImageFormat, ImageOptions, ImageTarget, MAX_SIDE, MIN_SIDE};
pub use context::{ContextEntry, ContextTarget};
use context::{constraints_text, context_entries};
pub use straggler::{
    Enough, Extra, MAX_STRAGGLER_EXTRA_FACTOR, MAX_STRAGGLER_EXTRA_MS, PolicyError, StragglerPolicy,
};

pub const MAX_FILES: usize = 5;
pub const MAX_DESCRIPTION_CHARS: usize = 20_000;
pub const MAX_TASK_DESCRIPTION_CHARS: usize = 50_000;
pub const MAX_IMPORTS: usize = 100;
pub const MAX_MODELS: usize = 8;
/// Paths, folders and globs one `context` list may name.
pub const MAX_CONTEXT_ENTRIES: usize = 20;
/// Characters of one `constraints` text.
pub const MAX_CONSTRAINTS_CHARS: usize = 10_000;
/// The largest repository map a batch may ask for, in prompt tokens.
pub const MAX_REPO_MAP_TOKENS: usize = 16_000;

/// What a batch file is, and so which stages make it: code from the candidate models, an image
/// from the image model. The audit's [`FileKind`] also names records that are no batch file
/// (direct writes, runs); a target maps to it only for its records and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    Code,
    Image,
}

impl From<TargetKind> for FileKind {
    fn from(kind: TargetKind) -> Self {
        match kind {
            TargetKind::Code => FileKind::Code,
            TargetKind::Image => FileKind::Image,
        }
    }
}

/// One validated file of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSpec {
    /// Its position in the request, for what is said of it (`files[i]`) and nothing else: a
    /// resumed batch keeps it for the files it has left.
    pub(crate) index: usize,
    pub(crate) path: RepoPath,
    pub(crate) kind: TargetKind,
    pub(crate) description: String,
    pub(crate) external_imports: Vec<String>,
    pub(crate) internal_imports: Vec<String>,
    pub(crate) expected_sha256: Option<String>,
    /// What an image file must end up as (`None` for code).
    pub(crate) image: Option<ImageTarget>,
    /// What the caller named for this file's models to see (`files[i].context`).
    pub(crate) context: Vec<ContextEntry>,
    /// `files[i].constraints`.
    pub(crate) constraints: Option<String>,
}

impl FileSpec {
    pub fn path(&self) -> &RepoPath {
        &self.path
    }
    pub fn kind(&self) -> TargetKind {
        self.kind
    }
    pub fn description(&self) -> &str {
        &self.description
    }
}

/// A validated `write_codebase` request.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    task_description: Option<String>,
    files: Vec<FileSpec>,
    options: Options,
    /// What the caller named for every file's models to see (`context`).
    context: Vec<ContextEntry>,
    /// `constraints`.
    constraints: Option<String>,
    /// Taken over from a replica that died or stopped: its model calls go ahead of new batches'.
    resumed: bool,
}

impl Batch {
    pub fn files(&self) -> &[FileSpec] {
        &self.files
    }
    pub fn options(&self) -> &Options {
        &self.options
    }
    pub fn task_description(&self) -> Option<&str> {
        self.task_description.as_deref()
    }
    /// What the caller named for every file's models to see.
    pub fn context(&self) -> &[ContextEntry] {
        &self.context
    }
    pub fn constraints(&self) -> Option<&str> {
        self.constraints.as_deref()
    }
    /// Taken over from a replica that died or stopped.
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// What is left of this batch once the files in `written` are: a batch of its own, resumed,
    /// each file keeping its place in the request ([`FileSpec`]'s index), so that what is said
    /// of it still names the caller's `files[i]`. It has no files when every file was written;
    /// the job answers such a batch from its records alone.
    pub(crate) fn without(&self, written: impl Fn(&RepoPath) -> bool) -> Batch {
        let files: Vec<FileSpec> = self
            .files
            .iter()
            .filter(|f| !written(&f.path))
            .cloned()
            .collect();
        Batch {
            files,
            resumed: true,
            ..self.clone()
        }
    }
}

/// A refusal of the request, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BatchError {
    pub field: String,
    pub message: String,
}

/// `options.validation.keep_tests` names one test file: for a batch of one code file, in its
/// language (one with generated checks), and not one of the batch's files.
fn keep_tests_fits(keep: &RepoPath, files: &[FileSpec]) -> Result<(), BatchError> {
    let field = "options.validation.keep_tests";
    let code: Vec<&FileSpec> = files
        .iter()
        .filter(|f| f.kind == TargetKind::Code)
        .collect();
    let [file] = code.as_slice() else {
        return Err(refuse(
            field,
            format!("needs a batch of exactly one code file, got {}", code.len()),
        ));
    };
    if files.iter().any(|f| &f.path == keep) {
        return Err(refuse(field, "must not be one of the batch's files"));
    }
    let language = writ_checks::Language::from_path(file.path.as_str());
    if !matches!(
        language,
        writ_checks::Language::Python | writ_checks::Language::JavaScript
    ) {
        return Err(refuse(
            field,
            format!(
                "generated checks are written for Python and JavaScript files only, and {} is {}",
                file.path,
                language.name()
            ),
        ));
    }
    if writ_checks::Language::from_path(keep.as_str()) != language {
        return Err(refuse(
            field,
            format!("must be a {} file, as {} is", language.name(), file.path),
        ));
    }
    Ok(())
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> BatchError {
    BatchError {
        field: field.into(),
        message: message.into(),
    }
}

/// Size and format for an image file: the options' size (both sides or neither, within
/// bounds) and format, which must agree with the file's extension.
fn image_target(
    path: &RepoPath,
    opts: Option<&ImageOptions>,
    field: String,
) -> Result<ImageTarget, BatchError> {
    let ext = path.extension().unwrap_or_default();
    let by_ext = ImageFormat::from_extension(&ext).ok_or_else(|| {
        refuse(
            field.clone(),
            format!("'.{ext}' is not an image type writ can write"),
        )
    })?;
    let Some(opts) = opts else {
        return Ok(ImageTarget {
            size: None,
            format: by_ext,
        });
    };
    if let Some(f) = opts.format
        && f != by_ext
    {
        return Err(refuse(
            format!("{field}.format"),
            format!(
                "'{}' does not match the file's extension '.{ext}'",
                f.as_str()
            ),
        ));
    }
    let size = match (opts.width, opts.height) {
        (None, None) => None,
        (Some(w), Some(h)) => {
            for (name, v) in [("width", w), ("height", h)] {
                if !(MIN_SIDE..=MAX_SIDE).contains(&v) {
                    return Err(refuse(
                        format!("{field}.{name}"),
                        format!("must be between {MIN_SIDE} and {MAX_SIDE} pixels, got {v}"),
                    ));
                }
            }
            Some((w, h))
        }
        (Some(_), None) => return Err(refuse(format!("{field}.height"), "is required with width")),
        (None, Some(_)) => return Err(refuse(format!("{field}.width"), "is required with height")),
    };
    Ok(ImageTarget {
        size,
        format: by_ext,
    })
}

const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "gif", "webp"];

impl Batch {
    pub fn parse(req: WriteCodebaseRequest) -> Result<Batch, BatchError> {
        if req.command != "write_codebase" {
            return Err(refuse(
                "command",
                format!("must be \"write_codebase\", got \"{}\"", req.command),
            ));
        }
        if req.files.is_empty() {
            return Err(refuse("files", "at least 1 file is required, got 0"));
        }
        if req.files.len() > MAX_FILES {
            return Err(refuse(
                "files",
                format!(
                    "at most {MAX_FILES} files per batch, got {}",
                    req.files.len()
                ),
            ));
        }
        if let Some(task) = &req.task_description {
            let n = task.chars().count();
            if n > MAX_TASK_DESCRIPTION_CHARS {
                return Err(refuse(
                    "task_description",
                    format!("at most {MAX_TASK_DESCRIPTION_CHARS} characters, got {n}"),
                ));
            }
        }
        let options = req.options.unwrap_or_default();
        if let Some(models) = &options.models {
            if models.is_empty() || models.len() > MAX_MODELS {
                return Err(refuse(
                    "options.models",
                    format!("between 1 and {MAX_MODELS} models, got {}", models.len()),
                ));
            }
            if let Some(i) = models.iter().position(|m| m.trim().is_empty()) {
                return Err(refuse(format!("options.models[{i}]"), "must not be empty"));
            }
        }
        if options
            .arbiter_model
            .as_deref()
            .is_some_and(|m| m.trim().is_empty())
        {
            return Err(refuse(
                "options.arbiter_model",
                "must not be empty when given",
            ));
        }

        if let Some(n) = options.repo_map_tokens
            && n > MAX_REPO_MAP_TOKENS
        {
            return Err(refuse(
                "options.repo_map_tokens",
                format!("at most {MAX_REPO_MAP_TOKENS}, got {n}"),
            ));
        }
        let context = context_entries(&req.context, "context")?;
        let constraints = constraints_text(req.constraints, "constraints")?;
        let straggler = options
            .straggler
            .as_ref()
            .map(StragglerOptions::policy)
            .transpose()?;
        let validation = options
            .validation
            .as_ref()
            .map(ValidationOptions::parse)
            .transpose()?;
        let fanout = options
            .fanout
            .as_ref()
            .map(|f| f.parse(validation.as_ref()))
            .transpose()?
            .unwrap_or_default();

        let mut files: Vec<FileSpec> = Vec::with_capacity(req.files.len());
        for (i, f) in req.files.into_iter().enumerate() {
            let field = |name: &str| format!("files[{i}].{name}");
            let raw = f.filename.unwrap_or_default();
            if raw.trim().is_empty() {
                return Err(refuse(
                    field("filename"),
                    "is required and must not be empty",
                ));
            }
            let path =
                RepoPath::parse(&raw).map_err(|e| refuse(field("filename"), e.to_string()))?;
            let description = f.code_description.unwrap_or_default();
            if description.trim().is_empty() {
                return Err(refuse(
                    field("code_description"),
                    "is required and must not be empty",
                ));
            }
            let n = description.chars().count();
            if n > MAX_DESCRIPTION_CHARS {
                return Err(refuse(
                    field("code_description"),
                    format!("at most {MAX_DESCRIPTION_CHARS} characters, got {n}"),
                ));
            }
            for (name, list) in [
                ("external_imports", &f.external_imports),
                ("internal_imports", &f.internal_imports),
            ] {
                if list.len() > MAX_IMPORTS {
                    return Err(refuse(
                        field(name),
                        format!("at most {MAX_IMPORTS} entries, got {}", list.len()),
                    ));
                }
            }
            let expected_sha256 = match f.expected_sha256 {
                None => None,
                Some(h) => {
                    let h = h.trim().to_ascii_lowercase();
                    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(refuse(
                            field("expected_sha256"),
                            "must be a SHA-256 as 64 hex digits",
                        ));
                    }
                    Some(h)
                }
            };
            let inside = |dir: &RepoPath, file: &RepoPath| {
                file.as_str()
                    .strip_prefix(dir.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
            };
            if let Some(other) = files
                .iter()
                .find(|o| inside(&o.path, &path) || inside(&path, &o.path))
            {
                return Err(refuse(
                    field("filename"),
                    format!(
                        "'{raw}' and files[{}] ('{}') cannot both be written: one would be a file and a directory at once",
                        other.index, other.path
                    ),
                ));
            }
            if let Some(other) = files.iter().find(|o| o.path == path) {
                return Err(refuse(
                    field("filename"),
                    format!(
                        "'{raw}' targets the same file as files[{}] ('{}')",
                        other.index, other.path
                    ),
                ));
            }
            let kind = match path.extension() {
                Some(ext) if IMAGE_EXTENSIONS.contains(&ext.as_str()) => TargetKind::Image,
                _ => TargetKind::Code,
            };
            let image = match kind {
                TargetKind::Code if f.image.is_some() => {
                    return Err(refuse(
                        field("image"),
                        "only image files (.png, .jpg, .jpeg, .gif, .webp) take image options",
                    ));
                }
                TargetKind::Code => None,
                TargetKind::Image => Some(image_target(
                    &path,
                    f.image.as_ref().or(options.image.as_ref()),
                    if f.image.is_some() {
                        field("image")
                    } else {
                        "options.image".to_string()
                    },
                )?),
            };
            files.push(FileSpec {
                index: i,
                path,
                kind,
                description,
                external_imports: f.external_imports,
                internal_imports: f.internal_imports,
                expected_sha256,
                image,
                context: context_entries(&f.context, &field("context"))?,
                constraints: constraints_text(f.constraints, &field("constraints"))?,
            });
        }
        if let Some(keep) = validation.as_ref().and_then(|v| v.keep_tests.as_ref()) {
            keep_tests_fits(keep, &files)?;
        }
        if options.review == Some(true) && options.dry_run {
            return Err(refuse(
                "options.review",
                "a dry run keeps nothing to review: ask for dry_run or for review, not both",
            ));
        }
        Ok(Batch {
            task_description: req.task_description.filter(|t| !t.trim().is_empty()),
            files,
            options: Options {
                models: options.models,
                arbiter_model: options.arbiter_model,
                image_model: options.image_model,
                dry_run: options.dry_run,
                atomic: options.atomic,
                run_async: options.run_async,
                straggler,
                validation,
                fanout,
                allow_removals: options.allow_removals,
                repo_map_tokens: options.repo_map_tokens,
                commit: options.commit,
                review: options.review,
                respect_claims: options.respect_claims,
            },
            context,
            constraints,
            resumed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesis::batch::StragglerPolicy;

    fn req(json: serde_json::Value) -> Result<Batch, BatchError> {
        Batch::parse(serde_json::from_value(json).unwrap())
    }

    fn file(name: &str) -> serde_json::Value {
        serde_json::json!({"filename": name, "code_description": "does things"})
    }

    #[test]
    fn six_files_are_refused_naming_the_limit() {
        let files: Vec<_> = (0..6).map(|i| file(&format!("f{i}.py"))).collect();
        let err =
            req(serde_json::json!({"command": "write_codebase", "files": files})).unwrap_err();
        assert_eq!(err.field, "files");
        assert_eq!(err.message, "at most 5 files per batch, got 6");
    }

    #[test]
    fn the_same_file_twice_after_normalisation_is_refused() {
        let err = req(serde_json::json!({"command": "write_codebase", "files": [file("a.py"), file("./a.py")]})).unwrap_err();
        assert_eq!(err.field, "files[1].filename");
        assert!(err.message.contains("files[0]"), "{err}");
    }

    #[test]
    fn a_file_and_a_directory_of_the_same_name_are_refused() {
        for pair in [["x", "x/y.py"], ["x/y.py", "x"], ["a/b", "a/b/c/d.py"]] {
            let err = req(serde_json::json!({"command": "write_codebase", "files": [file(pair[0]), file(pair[1])]}))
                .unwrap_err();
            assert_eq!(err.field, "files[1].filename", "{pair:?}");
            assert!(err.message.contains("files[0]"), "{err}");
        }
        // A shared prefix that is not a directory is fine.
        req(
            serde_json::json!({"command": "write_codebase", "files": [file("x"), file("xy/z.py")]}),
        )
        .unwrap();
    }

    #[test]
    fn each_refusal_names_its_field() {
        let cases = [
            (
                serde_json::json!({"command": "write", "files": [file("a.py")]}),
                "command",
            ),
            (
                serde_json::json!({"command": "write_codebase", "files": []}),
                "files",
            ),
            (
                serde_json::json!({"command": "write_codebase", "files": [{"filename": "", "code_description": "x"}]}),
                "files[0].filename",
            ),
            (
                serde_json::json!({"command": "write_codebase", "files": [{"filename": "a.py", "code_description": " "}]}),
                "files[0].code_description",
            ),
            (
                serde_json::json!({"command": "write_codebase", "files": [file("a.py"), file("../x.py")]}),
                "files[1].filename",
            ),
            (
                serde_json::json!({"command": "write_codebase", "files": [{"filename": "a.py", "code_description": "x", "expected_sha256": "abc"}]}),
                "files[0].expected_sha256",
            ),
            (
                serde_json::json!({"command": "write_codebase", "files": [file("a.py")], "options": {"models": []}}),
                "options.models",
            ),
        ];
        for (body, field) in cases {
            assert_eq!(req(body.clone()).unwrap_err().field, field, "{body}");
        }
    }

    #[test]
    fn a_bad_straggler_setting_is_refused_naming_its_field_and_limit() {
        let with = |straggler: serde_json::Value| {
            req(
                serde_json::json!({"command": "write_codebase", "files": [file("a.py")], "options": {"straggler": straggler}}),
            )
        };
        let err = with(serde_json::json!({"enough": 9, "extra_ms": 10})).unwrap_err();
        assert_eq!(err.field, "options.straggler.enough");
        assert!(err.message.contains("from 1 to 8"), "{err}");
        let err = with(serde_json::json!({"enough": 2, "extra_ms": 700_000})).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.message.as_str()),
            ("options.straggler.extra_ms", "at most 600000, got 700000")
        );
        let err = with(serde_json::json!({"enough": 2})).unwrap_err();
        assert_eq!(err.field, "options.straggler.extra_ms");
        let err = with(
            serde_json::json!({"enough": "all_but_slowest", "extra_ms": 5, "extra_factor": 1.0}),
        )
        .unwrap_err();
        assert_eq!(err.field, "options.straggler.extra_factor");
    }

    #[test]
    fn fanout_settings_need_the_callers_tests_or_generated_checks_and_a_first_round_within_the_model_limit()
     {
        let with = |options: serde_json::Value| {
            req(
                serde_json::json!({"command": "write_codebase", "files": [file("a.py")], "options": options}),
            )
        };
        let tests = serde_json::json!({"commands": [{"name": "python", "args": ["t.py"]}]});
        let b = with(serde_json::json!({"validation": tests, "fanout": {"stop_when_passing": true, "first_round": 2}})).unwrap();
        assert_eq!(
            b.options.fanout,
            Fanout {
                stop_when_passing: true,
                first_round: Some(2),
                routing: None,
            }
        );
        let b = with(serde_json::json!({"validation": {"generate": true}, "fanout": {"stop_when_passing": true, "first_round": 1}})).unwrap();
        assert_eq!(
            b.options.fanout,
            Fanout {
                stop_when_passing: true,
                first_round: Some(1),
                routing: None,
            }
        );
        let err = with(serde_json::json!({"fanout": {"first_round": 1}})).unwrap_err();
        assert_eq!(err.field, "options.fanout.first_round");
        assert!(
            err.message.contains("options.validation.generate"),
            "{}",
            err.message
        );
        let err = with(serde_json::json!({"fanout": {"stop_when_passing": true}})).unwrap_err();
        assert_eq!(err.field, "options.fanout.stop_when_passing");
        let err = with(serde_json::json!({"validation": tests, "fanout": {"first_round": 9}}))
            .unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.message.as_str()),
            ("options.fanout.first_round", "between 1 and 8, got 9")
        );
        // Off, it asks for nothing.
        let b = with(serde_json::json!({"fanout": {"stop_when_passing": false}})).unwrap();
        assert_eq!(b.options.fanout, Fanout::default());
    }

    #[test]
    fn a_straggler_policy_is_read_from_a_count_or_a_keyword() {
        let b = req(serde_json::json!({"command": "write_codebase", "files": [file("a.py")], "options": {"straggler": {"enough": 2, "extra_factor": 0.5}}})).unwrap();
        assert_eq!(
            b.options.straggler.unwrap(),
            StragglerPolicy::CutOff {
                enough: Enough::Count(2),
                extra: Extra::Relative(0.5)
            }
        );
        let b = req(serde_json::json!({"command": "write_codebase", "files": [file("a.py")], "options": {"straggler": {"enough": "all"}}})).unwrap();
        assert_eq!(b.options.straggler.unwrap(), StragglerPolicy::WaitAll);
    }

    #[test]
    fn image_options_are_checked_before_any_model_is_called() {
        let img = |opts: serde_json::Value| serde_json::json!({"command": "write_codebase", "files": [{"filename": "logo.png", "code_description": "a logo", "image": opts}]});
        assert_eq!(
            req(img(serde_json::json!({"width": 8, "height": 64})))
                .unwrap_err()
                .field,
            "files[0].image.width"
        );
        assert_eq!(
            req(img(serde_json::json!({"width": 64})))
                .unwrap_err()
                .field,
            "files[0].image.height"
        );
        assert_eq!(
            req(img(serde_json::json!({"format": "jpeg"})))
                .unwrap_err()
                .field,
            "files[0].image.format"
        );
        let ok = req(img(serde_json::json!({"width": 64, "height": 32}))).unwrap();
        assert_eq!(
            ok.files[0].image,
            Some(ImageTarget {
                size: Some((64, 32)),
                format: ImageFormat::Png
            })
        );
        let code = serde_json::json!({"command": "write_codebase", "files": [{"filename": "a.py", "code_description": "x", "image": {}}]});
        assert_eq!(req(code).unwrap_err().field, "files[0].image");
        let batch_wide = serde_json::json!({"command": "write_codebase", "files": [file("a.jpg")], "options": {"image": {"width": 100, "height": 100}}});
        assert_eq!(
            req(batch_wide).unwrap().files[0].image,
            Some(ImageTarget {
                size: Some((100, 100)),
                format: ImageFormat::Jpeg
            })
        );
    }

    #[test]
    fn raster_images_are_told_apart_from_code_and_svg_is_code() {
        let b = req(serde_json::json!({"command": "write_codebase", "files": [file("logo.PNG"), file("icon.svg"), file("a.py")]})).unwrap();
        let kinds: Vec<_> = b.files.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            vec![TargetKind::Image, TargetKind::Code, TargetKind::Code]
        );
    }
}
