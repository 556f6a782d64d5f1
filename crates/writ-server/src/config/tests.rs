use std::collections::HashMap;

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

/// Every name `load` asks the environment for, under a few configurations that take
/// different paths through it.
fn names_read() -> Vec<String> {
    let asked = std::cell::RefCell::new(Vec::<String>::new());
    for configured in [
        &[][..],
        &[("OPENROUTER_API_KEY", "sk-or-x"), ("CODE_LIST", "a/b")][..],
        &[("WRIT_LOCAL_MODEL", "off")][..],
        &[("WRIT_COMMANDS", r#"{"python": ["python3", "{args}"]}"#)][..],
    ] {
        let env = env_of(configured);
        Settings::load(None, &|name| {
            asked.borrow_mut().push(name.to_string());
            env(name)
        })
        .unwrap();
    }
    let mut names = asked.into_inner();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_setting_load_reads_is_declared() {
    let names = names_read();
    assert!(names.len() > 80, "{names:?}");
    for name in names {
        assert!(declared::find(&name).is_some(), "{name} is not declared");
    }
}

#[test]
fn a_declared_default_is_what_the_code_uses_when_the_setting_is_unset() {
    let unset = format!("{:?}", Settings::load(None, &env_of(&[])).unwrap());
    let mut checked = 0;
    for name in names_read() {
        let Some(setting) = declared::find(&name) else {
            continue;
        };
        let declared::DefaultValue::Literal(value) = setting.default else {
            continue;
        };
        let set = Settings::load(None, &env_of(&[(setting.name, value)]))
            .unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        assert_eq!(
            format!("{set:?}"),
            unset,
            "{name}: its declared default {value:?} is not the code's"
        );
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} defaults checked");
}

fn toml_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("writ.toml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

#[test]
fn writ_toml_takes_every_setting_that_may_be_given_there_under_its_key() {
    let mut text = String::new();
    let mut expected = Vec::new();
    for setting in declared::SETTINGS {
        let Some(key) = setting.file_key() else {
            continue;
        };
        let (toml_value, as_variable) = match setting.kind {
            declared::Kind::Whole => ("7".to_string(), "7".to_string()),
            declared::Kind::Switch => ("true".to_string(), "true".to_string()),
            declared::Kind::List => (r#"["a", "b"]"#.to_string(), "a,b".to_string()),
            declared::Kind::Json => (r#"{ x = ["y"] }"#.to_string(), r#"{"x":["y"]}"#.to_string()),
            declared::Kind::Tables => (
                r#"[{ id = "a/*" }]"#.to_string(),
                r#"[{"id":"a/*"}]"#.to_string(),
            ),
            _ => (r#""v""#.to_string(), "v".to_string()),
        };
        text.push_str(&format!("{key} = {toml_value}\n"));
        expected.push((setting.name, as_variable));
    }
    let (_dir, file) = toml_file(&text);
    let layer = source::FileLayer::read(Some(&file), &|_: &str| None).unwrap();
    for (name, value) in expected {
        assert_eq!(layer.get(name), Some(value.as_str()), "{name}");
    }
}

#[test]
fn an_unknown_key_in_writ_toml_is_refused_by_name_with_what_to_write_instead() {
    for (line, says) in [
        ("colour = \"red\"", "`colour` is not a setting writ knows"),
        (
            "otel_exporter_otlp_endpoint = \"http://c:4318\"",
            "set OTEL_EXPORTER_OTLP_ENDPOINT in the environment",
        ),
        (
            "writ_commands = { pytest = [\"pytest\"] }",
            "`writ_commands` is written `commands`",
        ),
        ("WRIT_ADDR = \"0.0.0.0:1\"", "is written `writ_addr`"),
        (
            "writ_max_body_bytes = true",
            "`writ_max_body_bytes` must be a whole number",
        ),
        (
            "code_list = [1, 2]",
            "`code_list` must be an array of strings",
        ),
    ] {
        let (_dir, file) = toml_file(line);
        let err = Settings::load(Some(&file), &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{line}: {err}");
    }
}

#[test]
fn the_commands_table_of_writ_toml_configures_the_commands() {
    let (_dir, file) = toml_file(
        "[commands]\npytest = [\"python3\", \"-m\", \"pytest\", \"{args}\"]\n\n[commands.checked]\nargv = [\"python3\", \"{args}\"]\nevidence = \"ok\"\n",
    );
    let s = Settings::load(Some(&file), &env_of(&[])).unwrap();
    let commands = s.run.commands.expect("commands from writ.toml");
    assert_eq!(commands.names().collect::<Vec<_>>(), ["checked", "pytest"]);
    assert!(commands.evidence("checked").is_some());
}

#[test]
fn logging_may_be_set_in_writ_toml_and_the_environment_wins() {
    let (_dir, file) = toml_file("rust_log = \"debug\"\nwrit_log_format = \"json\"\n");
    let s = Settings::load(Some(&file), &env_of(&[("RUST_LOG", "warn")])).unwrap();
    assert_eq!(
        s.log,
        LogSettings {
            filter: "warn".into(),
            json: true
        }
    );
    let err = Settings::load(None, &env_of(&[("WRIT_LOG_FORMAT", "yaml")])).unwrap_err();
    assert!(err.to_string().starts_with("WRIT_LOG_FORMAT:"), "{err}");
}

#[test]
fn formatters_and_diagnostics_must_name_configured_commands_or_start_up_fails_naming_them() {
    let commands = (
        "WRIT_COMMANDS",
        r#"{"fmt": ["python3", "fmt.py", "{args}"], "compile": ["python3", "-m", "py_compile", "{args}"], "bare": ["true"]}"#,
    );
    let s = Settings::load(
        None,
        &env_of(&[
            commands,
            ("WRIT_FORMATTERS", r#"{"python": "fmt"}"#),
            ("WRIT_DIAGNOSTICS", r#"{"python": "compile"}"#),
        ]),
    )
    .unwrap();
    assert_eq!(s.run.formatters, [("python".into(), "fmt".into())]);
    assert_eq!(s.run.diagnostics, [("python".into(), "compile".into())]);
    assert!(
        Settings::load(None, &env_of(&[commands]))
            .unwrap()
            .run
            .formatters
            .is_empty(),
        "none by default"
    );

    for (name, raw, says) in [
        ("WRIT_FORMATTERS", r#"{"python": "black"}"#, "\"black\""),
        (
            "WRIT_DIAGNOSTICS",
            r#"{"python": "bare"}"#,
            "takes the file's path",
        ),
        (
            "WRIT_DIAGNOSTICS",
            r#"{"cobol": "compile"}"#,
            "unknown language",
        ),
        ("WRIT_FORMATTERS", "ruff format", "JSON object"),
    ] {
        let err = Settings::load(None, &env_of(&[commands, (name, raw)])).unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with(name) && err.contains(says), "{err}");
    }
    let err = Settings::load(
        None,
        &env_of(&[("WRIT_FORMATTERS", r#"{"python": "fmt"}"#)]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("WRIT_FORMATTERS") && err.contains("WRIT_COMMANDS"),
        "{err}"
    );
}

#[test]
fn review_is_off_by_default_its_time_is_a_week_and_a_bad_time_is_named() {
    let s = Settings::load(None, &env_of(&[])).unwrap();
    assert!(!s.review.by_default);
    assert_eq!(s.review.ttl, Duration::from_secs(7 * 24 * 3600));
    let s = Settings::load(
        None,
        &env_of(&[("WRIT_REVIEW", "1"), ("WRIT_REVIEW_TTL", "90m")]),
    )
    .unwrap();
    assert!(s.review.by_default);
    assert_eq!(s.review.ttl, Duration::from_secs(90 * 60));
    for bad in ["0", "0s", "7 days", "-1d"] {
        let err = Settings::load(None, &env_of(&[("WRIT_REVIEW_TTL", bad)])).unwrap_err();
        assert!(err.to_string().contains("WRIT_REVIEW_TTL"), "{bad}: {err}");
    }
}

#[test]
fn history_retention_defaults_to_thirty_days_reads_units_and_names_a_bad_value() {
    let s = Settings::load(None, &env_of(&[])).unwrap();
    assert_eq!(
        s.history_retention,
        Some(Duration::from_secs(30 * 24 * 3600))
    );
    for (raw, want) in [
        ("12h", Some(12 * 3600)),
        ("90m", Some(5400)),
        ("7d", Some(7 * 24 * 3600)),
        ("off", None),
        ("0", None),
    ] {
        let s = Settings::load(None, &env_of(&[("WRIT_HISTORY_RETENTION", raw)])).unwrap();
        assert_eq!(s.history_retention, want.map(Duration::from_secs), "{raw}");
    }
    let err = Settings::load(None, &env_of(&[("WRIT_HISTORY_RETENTION", "3 weeks")])).unwrap_err();
    assert!(err.to_string().contains("WRIT_HISTORY_RETENTION"), "{err}");
}

#[test]
fn the_straggler_policy_waits_for_all_unless_configured_and_names_a_bad_variable() {
    use writ_core::synthesis::batch::{Enough, Extra};
    let s = Settings::load(None, &env_of(&[])).unwrap();
    assert_eq!(
        s.models.straggler,
        writ_core::synthesis::StragglerPolicy::WaitAll
    );
    let s = Settings::load(
        None,
        &env_of(&[
            ("WRIT_STRAGGLER_ENOUGH", "all_but_slowest"),
            ("WRIT_STRAGGLER_EXTRA_FACTOR", "0.5"),
        ]),
    )
    .unwrap();
    assert_eq!(
        s.models.straggler,
        writ_core::synthesis::StragglerPolicy::CutOff {
            enough: Enough::AllButSlowest,
            extra: Extra::Relative(0.5)
        }
    );
    let err = Settings::load(
        None,
        &env_of(&[
            ("WRIT_STRAGGLER_ENOUGH", "2"),
            ("WRIT_STRAGGLER_EXTRA_MS", "soon"),
        ]),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("WRIT_STRAGGLER_EXTRA_MS:"),
        "{err}"
    );
    let err = Settings::load(None, &env_of(&[("WRIT_STRAGGLER_ENOUGH", "2")])).unwrap_err();
    assert!(
        err.to_string().starts_with("WRIT_STRAGGLER_EXTRA_MS:"),
        "{err}"
    );
}

#[test]
fn defaults_are_the_embedded_ones() {
    let s = Settings::load(None, &env_of(&[])).unwrap();
    assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
    assert_eq!(s.repo_dir, PathBuf::from("./workspace"));
    assert_eq!(s.addr.to_string(), DEFAULT_ADDR);
    assert_eq!(s.models.code_list, writ_local::default_candidates());
    assert_eq!(
        s.models.arbiter_model.as_deref(),
        Some(writ_local::DEFAULT_MODEL)
    );
    assert_eq!(s.models.problem(), None, "the embedded model needs no key");
    assert!(
        s.models.reason.contains("embedded model"),
        "{}",
        s.models.reason
    );
}

#[test]
fn the_embedded_default_gives_way_to_a_key_a_code_list_or_the_off_switch() {
    let s = Settings::load(None, &env_of(&[("OPENROUTER_API_KEY", "sk-or-x")])).unwrap();
    assert!(s.models.code_list.is_empty());
    assert!(s.models.problem().unwrap().contains("CODE_LIST"));
    let s = Settings::load(None, &env_of(&[("CODE_LIST", "openai/gpt-x")])).unwrap();
    assert_eq!(s.models.code_list, vec!["openai/gpt-x"]);
    assert!(s.models.problem().unwrap().contains("OPENROUTER_API_KEY"));
    let s = Settings::load(None, &env_of(&[("WRIT_LOCAL_MODEL", "off")])).unwrap();
    assert!(s.models.code_list.is_empty());
    assert!(s.models.reason.contains("WRIT_LOCAL_MODEL=off"));
    let err = Settings::load(None, &env_of(&[("WRIT_LOCAL_MODEL", "maybe")])).unwrap_err();
    assert!(err.to_string().starts_with("WRIT_LOCAL_MODEL:"), "{err}");
}

#[test]
fn local_models_never_need_the_key_but_a_remote_one_in_the_mix_does() {
    let s = Settings::load(
        None,
        &env_of(&[(
            "CODE_LIST",
            "local/smollm2-135m@t0.3,local/smollm2-135m@t0.8",
        )]),
    )
    .unwrap();
    assert_eq!(s.models.problem(), None);
    assert!(s.models.uses_local_model());
    let s = Settings::load(
        None,
        &env_of(&[
            ("CODE_LIST", "local/smollm2-135m"),
            ("CODE_MODEL", "openai/gpt-x"),
        ]),
    )
    .unwrap();
    assert!(s.models.problem().unwrap().contains("OPENROUTER_API_KEY"));
    let s = Settings::load(None, &env_of(&[])).unwrap();
    assert!(
        s.models
            .provider_key_missing_for(Some(&["openai/gpt-x".to_string()]))
    );
    assert!(
        !s.models
            .provider_key_missing_for(Some(&["local/smollm2-135m".to_string()]))
    );
}

#[test]
fn named_local_models_keep_their_seeds_in_a_list_and_an_unknown_one_is_refused_by_name() {
    let s = Settings::load(
        None,
        &env_of(&[
            (
                "CODE_LIST",
                "local/qwen2.5-coder-1.5b@t0.8,s1,local/qwen2.5-coder-1.5b@t0.8,s2,openai/gpt-x",
            ),
            ("CODE_MODEL", "local/qwen2.5-coder-1.5b"),
            ("WRIT_TEST_MODELS", "local/gemma-3-270m@t0.2,s7"),
        ]),
    )
    .unwrap();
    assert_eq!(
        s.models.code_list,
        vec![
            "local/qwen2.5-coder-1.5b@t0.8,s1",
            "local/qwen2.5-coder-1.5b@t0.8,s2",
            "openai/gpt-x"
        ]
    );
    let names: Vec<_> = s.models.local_models().iter().map(|m| m.name).collect();
    assert_eq!(names, vec!["qwen2.5-coder-1.5b", "gemma-3-270m"]);
    let err = Settings::load(None, &env_of(&[("CODE_LIST", "local/llama-70b")])).unwrap_err();
    assert!(err.to_string().starts_with("CODE_LIST:"), "{err}");
    assert!(
        err.to_string().contains("local/qwen2.5-coder-1.5b"),
        "{err}"
    );
    let err =
        Settings::load(None, &env_of(&[("CODE_MODEL", "local/smollm2-135m@q1")])).unwrap_err();
    assert!(err.to_string().starts_with("CODE_MODEL:"), "{err}");
}

#[test]
fn a_model_file_is_given_by_name_and_path_and_the_rest_live_in_the_model_dir() {
    let s = Settings::load(
        None,
        &env_of(&[
            ("WRIT_LOCAL_MODEL_DIR", "/models"),
            ("WRIT_LOCAL_MODEL_FILES", "qwen2.5-coder-1.5b=/big/q.gguf"),
            ("WRIT_LOCAL_MODEL_PATH", "/small/s.gguf"),
        ]),
    )
    .unwrap();
    let local = &s.models.local;
    assert_eq!(
        local.path_of(&writ_local::catalogue::QWEN25_CODER_1_5B),
        PathBuf::from("/big/q.gguf")
    );
    assert_eq!(
        local.path_of(&writ_local::catalogue::SMOLLM2_135M),
        PathBuf::from("/small/s.gguf")
    );
    assert_eq!(
        local.path_of(&writ_local::catalogue::GEMMA3_270M),
        PathBuf::from("/models/gemma-3-270m-q4_k_m.gguf")
    );
    assert_eq!(
        local.max_tokens, None,
        "unset: each call's purpose sets the cap"
    );
    let err = Settings::load(
        None,
        &env_of(&[("WRIT_LOCAL_MODEL_FILES", "llama=/x.gguf")]),
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with("WRIT_LOCAL_MODEL_FILES:"),
        "{err}"
    );
}

#[test]
fn the_environment_wins_over_the_file_and_lists_split_on_commas() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("writ.toml");
    std::fs::write(
        &file,
        "repo_dir = \"/from/file\"\ncode_list = [\"a/x\", \"b/y\"]\ncode_model = \"file/arb\"\n",
    )
    .unwrap();
    let s = Settings::load(Some(&file), &env_of(&[("CODE_MODEL", "env/arb")])).unwrap();
    assert_eq!(s.repo_dir, PathBuf::from("/from/file"));
    assert_eq!(s.models.code_list, vec!["a/x", "b/y"]);
    assert_eq!(s.models.arbiter_model.as_deref(), Some("env/arb"));
}

#[test]
fn write_sessions_default_to_the_file_bound_and_refuse_a_zero_by_name() {
    let s = Settings::load(
        None,
        &env_of(&[
            ("WRIT_MAX_FILE_BYTES", "5000"),
            ("WRIT_MAX_BODY_BYTES", "4096"),
        ]),
    )
    .unwrap();
    assert_eq!(s.sessions.max_bytes, 5000);
    assert_eq!(
        s.sessions.max_chunk_bytes, 4096,
        "never above a request body"
    );
    assert_eq!(s.sessions.max_open, 16);
    assert_eq!(s.sessions.idle, Duration::from_millis(2000));
    assert_eq!(s.sessions.ttl, Duration::from_secs(3600));
    let err = Settings::load(None, &env_of(&[("WRITE_SESSION_TTL_SECS", "0")])).unwrap_err();
    assert!(err.to_string().contains("WRITE_SESSION_TTL_SECS"), "{err}");
}

#[test]
fn a_bad_value_names_its_variable() {
    let err = Settings::load(None, &env_of(&[("WRIT_ADDR", "nope")])).unwrap_err();
    assert!(err.to_string().starts_with("WRIT_ADDR:"), "{err}");
    let err = Settings::load(None, &env_of(&[("DATABASE_URL", "mysql://x")])).unwrap_err();
    assert!(err.to_string().starts_with("DATABASE_URL:"), "{err}");
}

#[test]
fn the_key_is_never_printed_and_its_absence_is_named() {
    let s = Settings::load(
        None,
        &env_of(&[
            ("OPENROUTER_API_KEY", "sk-or-supersecret"),
            ("CODE_LIST", "a/b"),
        ]),
    )
    .unwrap();
    assert!(!format!("{s:?}").contains("supersecret"));
    let s = Settings::load(
        None,
        &env_of(&[("DATABASE_URL", "postgres://writ:hunter2@db.internal/writ")]),
    )
    .unwrap();
    assert!(!format!("{s:?}").contains("hunter2"), "{s:?}");
    assert_eq!(s.models.problem(), None);
    let s = Settings::load(None, &env_of(&[("CODE_LIST", "a/b")])).unwrap();
    assert!(s.models.problem().unwrap().contains("OPENROUTER_API_KEY"));
    let s = Settings::load(
        None,
        &env_of(&[
            ("CODE_LIST", "a/b"),
            ("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1"),
        ]),
    )
    .unwrap();
    assert_eq!(s.models.problem(), None, "a local endpoint needs no key");
}
