//! Generation: one code file's prompt to every candidate model at once ([`super::fanout`]), each
//! answer checked as it arrives. What comes out is every candidate, viable or not, for
//! [`super::selection`] to choose among.

use writ_checks::Language;

use crate::budgets::DegradeLevel;
use crate::content::sha256_hex;
use crate::model::{ChatMessage, ModelClient};
use crate::path::RepoPath;
use crate::synthesis::batch::{Batch, FileSpec};
use crate::synthesis::context::{more_context, tokens};
use crate::synthesis::fanout::{self, Candidate, PassCheck};
use crate::synthesis::prompt::{self, ContextFile};
use crate::synthesis::response::PromptTokensByPart;
use crate::synthesis::routing::{self, Cell, FileChecks};
use crate::synthesis::stage::{FileCx, Present, SynthesisConfig};
use crate::synthesis::update::{Existing, Expect};
use crate::workspace::Workspace;

/// Characters of one repository file shown as context before it becomes an outline.
const MAX_CONTEXT_FILE_CHARS: usize = 12_000;
/// Characters of repository context in one prompt.
const MAX_CONTEXT_CHARS: usize = 40_000;
/// Repository files looked at for one prompt.
const MAX_CONTEXT_FILES: usize = 16;

/// Where an import hint may live: the hint as a path, and for a dotted module name in Python or
/// a bare name, the file it names (`pkg.mod` → `pkg/mod.py`).
fn import_paths(import: &str, language: Language) -> Vec<RepoPath> {
    let import = import.trim();
    let mut paths = Vec::new();
    if let Ok(p) = RepoPath::parse_nonempty(import) {
        paths.push(p);
    }
    let ext = language.extension();
    if let Some(ext) = ext
        && !import.contains('/')
        && !import.ends_with(&format!(".{ext}"))
    {
        let as_path = if language == Language::Python {
            import.replace('.', "/")
        } else {
            import.to_string()
        };
        if let Ok(p) = RepoPath::parse_nonempty(&format!("{as_path}.{ext}")) {
            paths.push(p);
        }
    }
    paths
}

/// What each part of a candidate prompt costs, in estimated tokens.
fn prompt_parts(
    batch: &Batch,
    file: &FileSpec,
    context: &[ContextFile],
    more: &prompt::MoreContext,
    current: Option<&str>,
    present: &Present,
    messages: &[ChatMessage],
) -> PromptTokensByPart {
    let others: usize = batch
        .files()
        .iter()
        .filter(|f| f.path != file.path)
        .map(|f| tokens(&f.description).min(75) + tokens(f.path.as_str()))
        .sum();
    let imports: usize = file
        .external_imports
        .iter()
        .chain(&file.internal_imports)
        .map(|i| tokens(i) + 1)
        .sum();
    PromptTokensByPart {
        task: tokens(&file.description)
            + batch.task_description().map_or(0, tokens)
            + imports
            + others,
        constraints: tokens(&prompt::constraints_section(batch, file)),
        named_context: tokens(&more.named_section()) + tokens(&more.own_section()),
        imported_files: context
            .iter()
            .map(|c| tokens(&c.text) + tokens(&c.path) + 12)
            .sum(),
        repo_map: tokens(&more.map_section()),
        current_file: current.map_or(0, tokens),
        // A line each: the date, the path, the operation and the model.
        recent_operations: present
            .recent
            .iter()
            .map(|op| tokens(&op.filename) + op.chosen_model.as_deref().map_or(0, tokens) + 8)
            .sum(),
        total: messages.iter().map(|m| tokens(&m.content)).sum(),
    }
}

/// A code file's candidates, with what selection needs to ask again (arbiter, fallback).
pub(crate) struct Generated {
    pub language: Language,
    /// The candidate models asked, in list order.
    pub models: Vec<String>,
    pub messages: Vec<ChatMessage>,
    /// One per model, in `models` order.
    pub answers: Vec<Candidate>,
    /// The file as it was when the batch began, when it existed: candidates are changes of it.
    pub existing: Option<Existing>,
    /// `options.allow_removals`.
    pub allow_removals: bool,
    /// The calls `options.fanout` saved or left for later.
    pub rounds: Rounds,
}

/// A file's models under `options.fanout`: those left for a second round, and the calls
/// stopped because a candidate passed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rounds {
    /// Models not asked yet (`first_round`): asked only when no candidate passes.
    pub later: Vec<String>,
    /// Models whose calls were cancelled once a candidate passed (`stop_when_passing`).
    pub stopped: Vec<String>,
}

/// A check that sees a candidate in the shape it would be written (an update rendered over
/// the existing file).
struct Rendered<'a> {
    check: &'a dyn PassCheck,
    existing: Option<&'a Existing>,
}

#[async_trait::async_trait]
impl PassCheck for Rendered<'_> {
    async fn passes(&self, code: &str) -> bool {
        match self.existing {
            Some(e) => self.check.passes(&e.render(code)).await,
            None => self.check.passes(code).await,
        }
    }

    fn passed(&self) -> &'static str {
        self.check.passed()
    }
}

impl Generated {
    /// What every answer for this file is checked against.
    pub fn expect<'a>(&'a self, file: &'a FileSpec) -> Expect<'a> {
        Expect {
            language: self.language,
            update: self.existing.as_ref().map(|e| writ_checks::UpdateTarget {
                original: &e.view,
                base: &e.view,
                description: &file.description,
                allow_removals: self.allow_removals,
            }),
        }
    }
}

/// Reads the file's current content (checking `expected_sha256` before any model is called),
/// builds its prompt and fans it out (to the first round's models under
/// `options.fanout.first_round`; with `stop`, cancelling the rest once a candidate passes it).
/// An `Err` is the file's failure, with no model called.
pub(crate) async fn generate(
    client: &dyn ModelClient,
    workspace: &dyn Workspace,
    config: &SynthesisConfig,
    cx: FileCx<'_>,
    stop: Option<&dyn PassCheck>,
    checks: FileChecks,
) -> Result<Generated, String> {
    let FileCx {
        batch,
        batch_file,
        present,
        sink,
    } = cx;
    let (file, clock) = (&batch_file.spec, &batch_file.upstream);
    let language = Language::from_path(file.path.as_str());
    let current = batch_file.current.as_deref();
    if let Some(expected) = &file.expected_sha256 {
        let actual = current.map(sha256_hex).unwrap_or_else(|| "absent".into());
        if &actual != expected {
            return Err(format!(
                "'{}' changed: expected sha256 {expected}, found {actual}; no model was called",
                file.path
            ));
        }
    }
    let existing = current.map(Existing::read).transpose().map_err(|why| {
        format!(
            "'{}' cannot be changed: {why}; no model was called",
            file.path
        )
    })?;
    let mut context = repository_context(workspace, batch, file).await;
    let current_view = existing.as_ref().map(|e| e.view.as_str());
    let shown: Vec<String> = context.iter().map(|c| c.path.clone()).collect();
    let more = more_context(
        workspace,
        config.repo_map_tokens,
        batch,
        batch_file,
        present,
        &shown,
    )
    .await;
    // A file the batch's named context shows already (in the shared part) is not shown twice.
    context.retain(|c| !more.named.iter().any(|n| n.path == c.path));
    let messages = prompt::candidate_messages(
        batch,
        file,
        language,
        current_view,
        &present.recent,
        &context,
        &more,
    );
    batch_file.record_prompt_tokens(prompt_parts(
        batch,
        file,
        &context,
        &more,
        current_view,
        present,
        &messages,
    ));
    let mut models = batch
        .options()
        .models
        .clone()
        .unwrap_or_else(|| config.candidates.clone());
    let mut later = match (&present.routing, batch.options().fanout.first_round) {
        (Some(outcomes), _) => {
            let cell = Cell::of(file.path.as_str(), existing.is_some());
            let decision = routing::plan(
                &models,
                &cell,
                outcomes,
                &config.routing,
                checks,
                &mut || rand::random::<f64>(),
            );
            models.clone_from(&decision.asked);
            let later = decision.later.clone();
            clock.routed(decision);
            later
        }
        (None, Some(n)) if n < models.len() => models.split_off(n),
        _ => Vec::new(),
    };
    if let Some(degraded) = &present.degraded {
        // Near a degrading budget's limit: one model, routing's first choice or the cheapest.
        let one = match (degraded.level, &degraded.model) {
            (DegradeLevel::CheapestModel, Some(cheapest)) => Some(cheapest.clone()),
            _ => clock
                .routing()
                .and_then(|r| r.scores.into_iter().find(|s| models.contains(&s.model)))
                .map(|s| s.model)
                .or_else(|| models.first().cloned()),
        };
        models = one.into_iter().collect();
        later.clear();
    }
    let policy = batch.options().straggler.unwrap_or(config.straggler);
    let mut generated = Generated {
        language,
        models,
        messages,
        answers: Vec::new(),
        existing,
        allow_removals: batch.options().allow_removals,
        rounds: Rounds {
            later,
            ..Rounds::default()
        },
    };
    let rendered = stop.map(|check| Rendered {
        check,
        existing: generated.existing.as_ref(),
    });
    let out = fanout::fan_out_until(
        client,
        &generated.models,
        &generated.messages,
        &generated.expect(file),
        config.call_settings(batch),
        file.path.as_str(),
        sink,
        policy,
        rendered.as_ref().map(|r| r as &dyn PassCheck),
    )
    .await;
    clock.add(out.waited);
    generated.answers = out.answers;
    generated.rounds.stopped = out.stopped;
    Ok(generated)
}

/// The current content of what the file builds on, when it exists in `REPO_DIR`: the files
/// its `internal_imports` name and the files the batch's checks run (the tests). Bounded per
/// file and in total; past the bound, an outline of the file's definitions.
async fn repository_context(
    workspace: &dyn Workspace,
    batch: &Batch,
    file: &FileSpec,
) -> Vec<ContextFile> {
    let mut wanted: Vec<RepoPath> = Vec::new();
    let language = Language::from_path(file.path.as_str());
    for import in &file.internal_imports {
        for candidate in import_paths(import, language) {
            if !wanted.contains(&candidate) {
                wanted.push(candidate);
            }
        }
    }
    if let Some(v) = &batch.options().validation {
        for arg in v.commands.iter().flat_map(|c| &c.args) {
            if let Ok(p) = RepoPath::parse_nonempty(arg)
                && !wanted.contains(&p)
            {
                wanted.push(p);
            }
        }
    }
    // The batch writes these itself; their descriptions are already in the prompt.
    wanted.retain(|p| !batch.files().iter().any(|f| &f.path == p));
    let mut shown = Vec::new();
    let mut budget = MAX_CONTEXT_CHARS;
    for path in wanted.into_iter().take(MAX_CONTEXT_FILES) {
        let Ok(Some(bytes)) = workspace.read(&path).await else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let chars = text.chars().count();
        let (text, outline) = if chars <= MAX_CONTEXT_FILE_CHARS.min(budget) {
            (text.into_owned(), false)
        } else {
            let outline = writ_checks::outline(&text, Language::from_path(path.as_str()));
            let (cut, _) =
                crate::content::truncate_chars(&outline, MAX_CONTEXT_FILE_CHARS.min(budget));
            (cut.to_string(), true)
        };
        if text.is_empty() {
            continue;
        }
        budget = budget.saturating_sub(text.chars().count());
        shown.push(ContextFile {
            path: path.to_string(),
            text,
            outline,
        });
        if budget == 0 {
            break;
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesis::doubles::{
        self, Answer, MemoryWorkspace, ScriptedModels, parse as batch,
    };
    use crate::synthesis::progress::NoProgress;

    fn config() -> SynthesisConfig {
        SynthesisConfig {
            candidates: vec!["alpha".into(), "beta".into()],
            ..SynthesisConfig::default()
        }
    }

    fn first_file<'a>(b: &'a Batch, present: &'a Present) -> FileCx<'a> {
        FileCx {
            batch: b,
            batch_file: &present.files[0],
            present,
            sink: &NoProgress,
        }
    }

    fn paths(found: Vec<RepoPath>) -> Vec<String> {
        found.into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn an_import_hint_is_tried_as_a_path_and_as_the_module_it_names() {
        assert_eq!(
            paths(import_paths("pkg.helpers", Language::Python)),
            ["pkg.helpers", "pkg/helpers.py"]
        );
        assert_eq!(
            paths(import_paths("util", Language::Rust)),
            ["util", "util.rs"]
        );
        assert_eq!(
            paths(import_paths(" src/a.py ", Language::Python)),
            ["src/a.py"]
        );
        assert!(import_paths("../outside", Language::Python).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn every_candidate_model_is_asked_once_with_one_prompt_showing_the_imported_file() {
        let models = ScriptedModels::default()
            .with(
                "alpha",
                vec![Answer::after(20, "```python\ndef f():\n    return 1\n```")],
            )
            .with("beta", vec![Answer::after(40, "I cannot help with that.")]);
        let workspace = MemoryWorkspace::default().with_file(
            "pkg/helpers.py",
            "def helper():\n    return 'HELPER_MARK'\n",
        );
        let b = batch(serde_json::json!({"command": "write_codebase", "files": [
            {"filename": "a.py", "code_description": "calls helper", "internal_imports": ["pkg.helpers"]}]}));
        let present = doubles::present(&b);
        let cx = first_file(&b, &present);
        let generated =
            match generate(&models, &workspace, &config(), cx, None, FileChecks::None).await {
                Ok(g) => g,
                Err(e) => panic!("generated: {e}"),
            };

        assert_eq!(generated.models, ["alpha", "beta"]);
        let alpha = models.requests_to("alpha");
        let beta = models.requests_to("beta");
        assert_eq!((alpha.len(), beta.len()), (1, 1));
        let text = |r: &crate::model::ChatRequest| {
            r.messages
                .iter()
                .map(|m| m.content.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            text(&alpha[0]),
            text(&beta[0]),
            "one prompt for every model"
        );
        assert!(text(&alpha[0]).concat().contains("HELPER_MARK"));
        // Each answer is checked as it arrives: code is viable, a refusal is not.
        let viable: Vec<bool> = generated.answers.iter().map(|c| c.code.is_some()).collect();
        assert_eq!(viable, [true, false]);
        let tokens = present.files[0].prompt_tokens();
        assert!(
            matches!(tokens, Some(t) if t.imported_files > 0 && t.total >= t.imported_files),
            "the prompt's parts are counted for the answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_that_differs_from_its_expected_sha256_fails_alone_and_no_model_is_called() {
        let models = ScriptedModels::default().with("alpha", vec![Answer::after(5, "x")]);
        let b = batch(serde_json::json!({"command": "write_codebase", "files": [
            {"filename": "a.py", "code_description": "d", "expected_sha256": sha256_hex(b"old\n")}]}));
        let mut present = doubles::present(&b);
        present.files[0].current = Some(b"new\n".to_vec());
        let cx = first_file(&b, &present);
        let failed = generate(
            &models,
            &MemoryWorkspace::default(),
            &config(),
            cx,
            None,
            FileChecks::None,
        )
        .await;
        match failed {
            Err(why) => assert!(
                why.contains("changed") && why.contains("no model was called"),
                "{why}"
            ),
            Ok(_) => panic!("a stale file is not generated"),
        }
        assert!(
            models
                .requests
                .lock()
                .map(|r| r.is_empty())
                .unwrap_or(false)
        );
    }
}
