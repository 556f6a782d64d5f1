//! `writ check`: a pre-flight report a person can read, and an exit code a script can use.

use std::io::Write;

use writ_core::Workspace;

use crate::config::Settings;

#[derive(Debug)]
pub struct Line {
    pub ok: bool,
    /// Whether a write needs this; a failed optional line is a warning, not a failure.
    pub required: bool,
    pub name: &'static str,
    pub detail: String,
}

/// Runs every check; never panics, never changes anything but a probe file in `REPO_DIR`.
pub async fn run_checks(settings: &Settings) -> Vec<Line> {
    let mut lines = vec![Line {
        ok: true,
        required: true,
        name: "configuration",
        detail: match &settings.config_file {
            Some(p) => format!("read from the environment and {}", p.display()),
            None => "read from the environment (no writ.toml)".to_string(),
        },
    }];

    let url = writ_store::redact_url(&settings.database_url);
    let database = match writ_store::connect(&settings.database_url).await {
        Err(e) => Line {
            ok: false,
            required: true,
            name: "database",
            detail: format!("{url}: not reachable: {e}"),
        },
        Ok(store) => match store.is_migrated().await {
            Ok(true) => Line {
                ok: true,
                required: true,
                name: "database",
                detail: format!("{url}: reachable, migrated"),
            },
            Ok(false) => Line {
                ok: false,
                required: true,
                name: "database",
                detail: format!(
                    "{url}: reachable but not migrated; run `writ migrate` (writ serve also migrates at start)"
                ),
            },
            Err(e) => Line {
                ok: false,
                required: true,
                name: "database",
                detail: format!("{url}: {e}"),
            },
        },
    };
    let database_ok = database.ok;
    lines.push(database);

    let repo = settings.repo_dir.display().to_string();
    let repo_line = match writ_workspace::RepoWorkspace::open(&settings.repo_dir).await {
        Err(e) => Line {
            ok: false,
            required: true,
            name: "repo_dir",
            detail: format!("REPO_DIR {repo}: cannot be created or opened: {e}"),
        },
        Ok(ws) => match ws.probe_writable().await {
            Ok(()) => Line {
                ok: true,
                required: true,
                name: "repo_dir",
                detail: format!("REPO_DIR {}: exists, writable", ws.root().display()),
            },
            Err(e) => Line {
                ok: false,
                required: true,
                name: "repo_dir",
                detail: format!("REPO_DIR {}: not writable: {e}", ws.root().display()),
            },
        },
    };
    lines.push(repo_line);

    let models = if settings.models.code_list.is_empty() {
        Line {
            ok: false,
            required: false,
            name: "models",
            detail: format!(
                "CODE_LIST is empty ({}): direct file routes work, POST /write_codebase needs CODE_LIST (and CODE_MODEL for the arbiter)",
                settings.models.reason
            ),
        }
    } else {
        Line {
            ok: true,
            required: true,
            name: "models",
            detail: format!(
                "candidates {}; arbiter {}; fallback {}",
                settings.models.code_list.join(", "),
                settings
                    .models
                    .arbiter_model
                    .as_deref()
                    .unwrap_or("(none: first viable candidate wins)"),
                settings
                    .models
                    .fallback_model
                    .as_deref()
                    .unwrap_or("(none)")
            ),
        }
    };
    lines.push(models);

    if !settings.models.code_list.is_empty() {
        lines.extend(remote_provider_lines(settings));
        if settings.models.uses_local_model() {
            lines.push(local_provider_line(settings));
        }
        lines.extend(reachable_lines(settings).await);
    }
    lines.push(local_models_line(settings));
    lines.push(commands_line(settings).await);
    lines.extend(configuration_lines(settings));
    if database_ok {
        lines.push(keys_line(settings).await);
    }
    lines
}

/// What the settings say will not work, each with its fix, found without the network or the
/// database: commands whose program the sandbox cannot find, and generated checks without a
/// command to run them. `writ check` prints them; `writ serve` logs them at start-up.
pub fn configuration_lines(settings: &Settings) -> Vec<Line> {
    let warn = |name, detail| Line {
        ok: false,
        required: false,
        name,
        detail,
    };
    let mut lines = Vec::new();
    let run = &settings.run;
    let Some(commands) = &run.commands else {
        if run.generate_checks {
            lines.push(warn(
                "generated",
                "WRIT_GENERATE_CHECKS is on but no commands are configured, so batches go to the arbiter without generated checks: set WRIT_COMMANDS to {\"python\": [\"python3\", \"{args}\"], \"node\": [\"node\", \"{args}\"]} (or a [commands] table in writ.toml)".to_string(),
            ));
        }
        return lines;
    };
    let unfound: Vec<String> = commands
        .programs()
        .filter(|(_, program)| writ_sandbox::find_program(program, &run.extra_ro_paths).is_none())
        .map(|(name, program)| format!("{name} ({program})"))
        .collect();
    if !unfound.is_empty() {
        lines.push(warn(
            "programs",
            format!(
                "not found where the sandbox looks (/usr/local/bin, /usr/bin, /bin, or a path under /usr or WRIT_SANDBOX_RO_PATHS), so these commands cannot run: {}; install them, or give a path the sandbox shows",
                unfound.join(", ")
            ),
        ));
    }
    let mut usable = Vec::new();
    let mut unusable = Vec::new();
    for (language, command) in &run.check_commands {
        let program = commands
            .programs()
            .find(|(name, _)| name == command)
            .map(|(_, program)| program);
        match program {
            None => unusable.push(format!(
                "{language}: no command {command:?} in WRIT_COMMANDS (add \"{command}\": [\"{}\", \"{{args}}\"])",
                if language == "javascript" { "node" } else { "python3" }
            )),
            Some(program) if writ_sandbox::find_program(program, &run.extra_ro_paths).is_none() => {
                unusable.push(format!("{language}: {command} runs {program}, which the sandbox cannot find"))
            }
            Some(_) => usable.push(format!("{language} → {command}")),
        }
    }
    let switch = if run.generate_checks {
        "on for every batch (WRIT_GENERATE_CHECKS)"
    } else {
        "per batch (options.validation.generate)"
    };
    lines.push(Line {
        ok: !usable.is_empty(),
        required: false,
        name: "generated",
        detail: match (usable.is_empty(), unusable.is_empty()) {
            (false, true) => format!("generated checks {switch}: {}", usable.join(", ")),
            (false, false) => format!(
                "generated checks {switch}: {}; not for {}",
                usable.join(", "),
                unusable.join("; ")
            ),
            (true, _) => format!(
                "generated checks {switch} cannot run for any language, so those batches go to the arbiter without them: {}",
                unusable.join("; ")
            ),
        },
    });
    lines
}

/// Whether a key exists, and whether the keys hold the scopes the configured features need.
async fn keys_line(settings: &Settings) -> Line {
    use writ_core::keys::Scope;
    let stored = match writ_store::connect(&settings.database_url).await {
        Ok(store) => store.list_keys().await,
        Err(e) => Err(e),
    };
    let stored = match stored {
        Ok(keys) => keys,
        Err(e) => {
            return Line {
                ok: false,
                required: false,
                name: "keys",
                detail: format!("cannot list the keys: {e}"),
            };
        }
    };
    let held: Vec<writ_core::keys::Scopes> = stored
        .iter()
        .filter(|k| k.revoked_at.is_none())
        .map(|k| k.scopes)
        .chain(settings.guard.api_keys.iter().map(|k| k.scopes))
        .collect();
    if held.is_empty() {
        let loopback = settings.addr.ip().is_loopback();
        return match (&settings.guard.admin_key_file, loopback) {
            (Some(file), _) => Line {
                ok: true,
                required: true,
                name: "keys",
                detail: format!(
                    "none yet: writ serve makes one with every scope and writes it to {} (WRIT_ADMIN_KEY_FILE)",
                    file.display()
                ),
            },
            (None, true) => Line {
                ok: true,
                required: true,
                name: "keys",
                detail: "none: every route is open on this loopback address; once a key exists (writ keys create), every call but /healthz, /readyz and / must send it (Authorization: Bearer)".into(),
            },
            (None, false) => Line {
                ok: false,
                required: true,
                name: "keys",
                detail: format!(
                    "WRIT_ADDR {} is not a loopback address and no key exists, so writ serve will refuse to start: set WRIT_ADMIN_KEY_FILE, run `writ keys create NAME --scopes read,write,run,admin`, or set WRIT_API_KEYS",
                    settings.addr
                ),
            },
        };
    }
    let mut needed = Vec::new();
    if settings.run.commands.is_some() {
        needed.push((Scope::Run, "options.validation and POST /run"));
    }
    if settings.workspaces_dir.is_some() {
        needed.push((Scope::Admin, "creating workspaces"));
    }
    let missing: Vec<String> = needed
        .into_iter()
        .filter(|(scope, _)| !held.iter().any(|s| s.contains(*scope)))
        .map(|(scope, what)| {
            format!(
                "no key holds the {} scope, which {what} need: writ keys create NAME --scopes read,write,{}",
                scope.as_str(),
                scope.as_str()
            )
        })
        .collect();
    Line {
        ok: missing.is_empty(),
        required: false,
        name: "keys",
        detail: if missing.is_empty() {
            format!("{} active; every call must send one", held.len())
        } else {
            missing.join("; ")
        },
    }
}

/// Each remote provider a configured model goes to: its base URL, its models, whether its key is
/// set (by the variable's name; never the key), and how their calls are costed. A key the
/// provider needs and does not have fails the line.
fn remote_provider_lines(settings: &Settings) -> Vec<Line> {
    let m = &settings.models;
    m.providers
        .remotes
        .iter()
        .enumerate()
        .filter_map(|(i, provider)| {
            let models = models_of(settings, i);
            if models.is_empty() {
                return None;
            }
            let var = provider.key_var.as_deref().unwrap_or("no key variable");
            let key = if provider.key_missing() {
                format!("{var} is not set, and this provider needs a key")
            } else if provider.key.is_some() {
                format!("{var} set")
            } else {
                "no key needed for this endpoint".to_string()
            };
            let extra = if provider.headers.0.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = provider.headers.0.iter().map(|(n, _)| n.as_str()).collect();
                format!("; headers {}", names.join(", "))
            };
            Some(Line {
                ok: !provider.key_missing(),
                required: true,
                name: "provider",
                detail: format!(
                    "{} serves {} ({key}{extra}); {}",
                    provider.base_url,
                    models.join(", "),
                    costs(settings, &models, provider.reports_cost())
                ),
            })
        })
        .collect()
}

/// The models in use that go to the remote provider `index`.
fn models_of(settings: &Settings, index: usize) -> Vec<String> {
    let m = &settings.models;
    m.in_use()
        .into_iter()
        .filter(|id| m.providers.remote_of(id) == Some(index))
        .collect()
}

/// How the calls for `models` get their cost: reported by their provider, or priced by
/// `[[models]]`; those with neither are counted by tokens only.
fn costs(settings: &Settings, models: &[String], reported: bool) -> String {
    if reported {
        return "cost as the provider reports it".into();
    }
    let (priced, unpriced): (Vec<&String>, Vec<&String>) = models
        .iter()
        .partition(|id| settings.models.providers.price_of(id).is_some());
    let list = |ids: &[&String]| {
        ids.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (priced.is_empty(), unpriced.is_empty()) {
        (_, true) => "cost from the prices of [[models]]".into(),
        (true, false) => {
            "no cost reported and no price in [[models]]: counted by tokens only".into()
        }
        (false, false) => format!(
            "cost from the prices of [[models]] for {}; no price for {} (counted by tokens only)",
            list(&priced),
            list(&unpriced)
        ),
    }
}

/// Whether each remote provider serves the models the configuration sends it (candidates,
/// arbiter, fallback, test writers, image model; the embedded `local/…` ones are the local-models
/// line's): `GET {base}/models`, which OpenRouter and the OpenAI-compatible servers (vLLM,
/// llama.cpp, Ollama) answer with their ids. A list naming none of them fails the check, with
/// the fix; a provider that cannot be reached, or lists nothing, is a warning (the models may
/// still answer). Nothing for a provider without the key it needs (its provider line says so).
pub async fn reachable_lines(settings: &Settings) -> Vec<Line> {
    let m = &settings.models;
    if m.code_list.is_empty() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    for (i, provider) in m.providers.remotes.iter().enumerate() {
        let mut remote: Vec<String> = models_of(settings, i)
            .iter()
            .map(|id| id.split('@').next().unwrap_or(id).to_owned())
            .collect();
        remote.sort_unstable();
        remote.dedup();
        if remote.is_empty() || provider.key_missing() {
            continue;
        }
        // The default provider's endpoint is a variable; the others', an entry's field.
        let endpoint_setting = if i == 0 {
            "OPENROUTER_BASE_URL"
        } else {
            "its base_url in [[models]]"
        };
        lines.extend(reachable_line(provider, &remote, endpoint_setting).await);
    }
    lines
}

/// [`reachable_lines`] for one provider and the models it is sent.
async fn reachable_line(
    provider: &crate::config::providers::Provider,
    remote: &[String],
    endpoint_setting: &str,
) -> Option<Line> {
    let base = provider.base_url.trim_end_matches('/');
    let warn = |detail: String| Line {
        ok: false,
        required: false,
        name: "reachable",
        detail,
    };
    // reqwest is built without a default TLS provider; writ names ring wherever it makes one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .ok()?;
    let mut request = client.get(format!("{base}/models"));
    if let Some(key) = &provider.key {
        use secrecy::ExposeSecret;
        request = request.bearer_auth(key.expose_secret());
    }
    for (name, value) in &provider.headers.0 {
        request = request.header(name.as_str(), value.as_str());
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        // The error names the URL only; the key travels in a header and is never printed.
        Err(e) => {
            return Some(warn(format!(
                "{base} cannot be reached ({}), so no model call will succeed until it can: check {endpoint_setting} and the network",
                if e.is_timeout() {
                    "no answer within 5 s".to_string()
                } else {
                    e.without_url().to_string()
                }
            )));
        }
    };
    let status = answer.status();
    let listed: Option<Vec<String>> = if status.is_success() {
        answer.json::<serde_json::Value>().await.ok().and_then(|v| {
            v.get("data")?.as_array().map(|models| {
                models
                    .iter()
                    .filter_map(|model| model.get("id")?.as_str().map(str::to_owned))
                    .collect()
            })
        })
    } else {
        None
    };
    let Some(listed) = listed.filter(|l| !l.is_empty()) else {
        return Some(warn(format!(
            "{base}/models answered {status} without a list of models, so writ cannot tell whether {} are served there",
            remote.join(", ")
        )));
    };
    let missing: Vec<&str> = remote
        .iter()
        .map(String::as_str)
        .filter(|id| !listed.iter().any(|l| l == id))
        .collect();
    Some(if missing.len() == remote.len() {
        Line {
            ok: false,
            required: true,
            name: "reachable",
            detail: format!(
                "{base} serves none of the configured models ({}): set CODE_LIST, CODE_MODEL and CODE_GEN_MODEL to ids listed at {base}/models (it lists {} models, e.g. {})",
                missing.join(", "),
                listed.len(),
                listed
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    } else if !missing.is_empty() {
        warn(format!(
            "{base} does not list {}, so calls to them will fail; it serves {}",
            missing.join(", "),
            remote
                .iter()
                .map(String::as_str)
                .filter(|id| !missing.contains(id))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    } else {
        Line {
            ok: true,
            required: false,
            name: "reachable",
            detail: format!("{base} serves {}", remote.join(", ")),
        }
    })
}

/// The embedded models: which, why, and whether each configured one's file is here (or will
/// be fetched on first use). Not ready when a configured model is absent and must be fetched
/// by hand, or its file is another model.
fn local_provider_line(settings: &Settings) -> Line {
    let built = cfg!(feature = "local-model");
    let local = &settings.models.local;
    let mut ok = built && local.enabled;
    let mut states = Vec::new();
    for model in settings.models.local_models() {
        let (present, state) = model_state(model, &local.path_of(model));
        if !present && !model.fetch_on_first_use {
            ok = false;
        }
        states.push(format!("{} {state}", model.id()));
    }
    let local_in_use: Vec<String> = settings
        .models
        .in_use()
        .into_iter()
        .filter(|id| writ_local::is_local(id))
        .collect();
    let why_off = match (built, local.enabled) {
        (false, _) => "; but writ was built without the local-model feature",
        (true, false) => "; but WRIT_LOCAL_MODEL=off",
        (true, true) => "",
    };
    Line {
        ok,
        required: true,
        name: "provider",
        detail: format!(
            "embedded llama.cpp: {}{why_off}; why: {}; {}",
            states.join("; "),
            settings.models.reason,
            costs(settings, &local_in_use, false)
        ),
    }
}

/// Every model writ embeds, present or not, with what each is: so `writ check` says which
/// models this machine has. Never required.
fn local_models_line(settings: &Settings) -> Line {
    let local = &settings.models.local;
    let states: Vec<String> = writ_local::CATALOGUE
        .iter()
        .map(|model| {
            format!(
                "{} {}",
                model.id(),
                model_state(model, &local.path_of(model)).1
            )
        })
        .collect();
    Line {
        ok: true,
        required: false,
        name: "local models",
        detail: format!("{} (in {})", states.join("; "), local.model_dir.display()),
    }
}

/// Whether `model`'s file is at `path` and is that model, and in words what it is: present
/// (size, hash pinned or not, publisher), not that model, or missing with how to get it. Reads
/// the header and a stamp, never hashes: a report stays quick.
pub fn model_state(model: &writ_local::LocalModel, path: &std::path::Path) -> (bool, String) {
    let publisher = if model.publisher_verified {
        ""
    } else {
        ", publisher unverified"
    };
    if !path.is_file() {
        let how = if model.fetch_on_first_use {
            "fetched on first use".to_string()
        } else {
            format!("`writ models fetch {}`", model.name)
        };
        return (false, format!("missing at {} ({how})", path.display()));
    }
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    match writ_local::identity::check(model, path, writ_local::identity::Hashing::StampOnly) {
        Ok(identity) => (
            true,
            format!(
                "present at {} ({:.0} MB, {}{publisher})",
                path.display(),
                size as f64 / 1e6,
                identity.describe()
            ),
        ),
        Err(e) => (false, format!("REFUSED: {e}")),
    }
}

/// The command sandbox: probed for real when commands are configured, so a machine where it
/// cannot start says why here, before any request needs it. Not required for writes.
async fn commands_line(settings: &Settings) -> Line {
    let Some(commands) = settings.run.commands.clone() else {
        return Line {
            ok: false,
            required: false,
            name: "commands",
            detail: "none configured, so POST /run and options.validation answer 503: set WRIT_COMMANDS (or a [commands] table in writ.toml), e.g. {\"pytest\": [\"python3\", \"-m\", \"pytest\", \"{args}\"]}"
                .into(),
        };
    };
    let names: Vec<String> = commands.names().map(str::to_string).collect();
    match writ_sandbox::Sandbox::probe(settings.run.sandbox_config()).await {
        Ok(sandbox) => Line {
            ok: true,
            required: false,
            name: "commands",
            detail: format!(
                "sandbox ready (bubblewrap); scratch: {}; commands: {}{}",
                writ_sandbox::describe(sandbox.mechanism(&settings.repo_dir)),
                names.join(", "),
                project_checks(settings)
            ),
        },
        Err(e) => Line {
            ok: false,
            required: false,
            name: "commands",
            detail: format!(
                "the sandbox cannot start: {}; POST /run and options.validation will answer 503",
                e.reason
            ),
        },
    }
}

/// The project's own formatter and diagnostics per language, when configured
/// (`WRIT_FORMATTERS`, `WRIT_DIAGNOSTICS`), as the commands line shows them.
fn project_checks(settings: &Settings) -> String {
    let list = |setting: &[(String, String)]| {
        setting
            .iter()
            .map(|(language, command)| format!("{language} → {command}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    if !settings.run.formatters.is_empty() {
        out.push_str(&format!("; formatters: {}", list(&settings.run.formatters)));
    }
    if !settings.run.diagnostics.is_empty() {
        out.push_str(&format!(
            "; diagnostics: {}",
            list(&settings.run.diagnostics)
        ));
    }
    out
}

/// Prints the report; returns whether every required check passed.
pub fn print_report(lines: &[Line], out: &mut dyn Write) -> std::io::Result<bool> {
    writeln!(out, "writ check")?;
    for l in lines {
        let mark = match (l.ok, l.required) {
            (true, _) => "ok  ",
            (false, true) => "FAIL",
            (false, false) => "warn",
        };
        writeln!(out, "  [{mark}] {:<13} {}", l.name, l.detail)?;
    }
    let ok = lines.iter().all(|l| l.ok || !l.required);
    writeln!(
        out,
        "{}",
        if ok {
            "ready to write"
        } else {
            "not ready: fix the FAIL lines above"
        }
    )?;
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_for(env: &[(&str, &str)]) -> Vec<Line> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let settings = Settings::load(None, &|name: &str| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .unwrap();
        configuration_lines(&settings)
    }

    #[test]
    fn generated_checks_switched_on_without_commands_are_said_with_the_fix() {
        let lines = lines_for(&[("WRIT_GENERATE_CHECKS", "1")]);
        let line = lines.iter().find(|l| l.name == "generated").unwrap();
        assert!(!line.ok);
        assert!(line.detail.contains("set WRIT_COMMANDS"), "{}", line.detail);
        assert!(
            lines_for(&[]).is_empty(),
            "nothing to say when nothing is asked for"
        );
    }

    #[test]
    fn generated_checks_name_the_languages_they_can_run_and_how_to_add_the_others() {
        let lines = lines_for(&[("WRIT_COMMANDS", r#"{"python": ["python3", "{args}"]}"#)]);
        let line = lines.iter().find(|l| l.name == "generated").unwrap();
        assert!(line.ok, "{}", line.detail);
        assert!(line.detail.contains("python → python"), "{}", line.detail);
        assert!(
            line.detail.contains(
                r#"javascript: no command "node" in WRIT_COMMANDS (add "node": ["node", "{args}"])"#
            ),
            "{}",
            line.detail
        );
        let lines = lines_for(&[
            ("WRIT_GENERATE_CHECKS", "true"),
            (
                "WRIT_COMMANDS",
                r#"{"pytest": ["python3", "-m", "pytest", "{args}"]}"#,
            ),
        ]);
        let line = lines.iter().find(|l| l.name == "generated").unwrap();
        assert!(!line.ok, "no command runs them: {}", line.detail);
        assert!(
            line.detail.contains("cannot run for any language"),
            "{}",
            line.detail
        );
    }

    #[test]
    fn a_command_whose_program_the_sandbox_cannot_find_is_named() {
        let lines = lines_for(&[(
            "WRIT_COMMANDS",
            r#"{"ok": ["python3", "{args}"], "gone": ["/usr/bin/env", "A=1", "no-such-program-here"], "opt": ["/opt/tool/bin/run"]}"#,
        )]);
        let line = lines.iter().find(|l| l.name == "programs").unwrap();
        assert!(
            line.detail.contains("gone (no-such-program-here)")
                && line.detail.contains("opt (/opt/tool/bin/run)")
                && !line.detail.contains("ok (python3)"),
            "{}",
            line.detail
        );
    }

    #[test]
    fn the_commands_line_names_the_projects_formatter_and_diagnostics_per_language() {
        let env = |name: &str| match name {
            "WRIT_COMMANDS" => Some(r#"{"fmt": ["fmt", "{args}"], "cc": ["cc", "{args}"]}"#.into()),
            "WRIT_FORMATTERS" => Some(r#"{"python": "fmt"}"#.into()),
            "WRIT_DIAGNOSTICS" => Some(r#"{"rust": "cc", "python": "cc"}"#.into()),
            _ => None,
        };
        let settings = Settings::load(None, &env).unwrap();
        assert_eq!(
            project_checks(&settings),
            "; formatters: python → fmt; diagnostics: python → cc, rust → cc"
        );
        let none = Settings::load(None, &|_: &str| None).unwrap();
        assert_eq!(project_checks(&none), "");
    }
}
