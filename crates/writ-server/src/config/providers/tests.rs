//! `[[models]]` read from writ.toml and from `WRIT_MODEL_PROVIDERS`, through `Settings::load`.

use std::path::PathBuf;

use writ_local::Price;

use crate::config::Settings;

fn load(file: Option<&PathBuf>, pairs: &[(&str, &str)]) -> Result<Settings, String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Settings::load(file.map(PathBuf::as_path), &|name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    })
    .map_err(|e| e.to_string())
}

fn toml_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("writ.toml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

const TWO_PROVIDERS: &str = r#"
code_list = ["openai/gpt-4.1", "openai/gpt-oss-20b", "anthropic/claude-x", "local/smollm2-135m"]

[[models]]
id = "openai/*"
base_url = "https://api.openai.example/v1/"
api_key_env = "OPENAI_KEY"
headers = { "OpenAI-Project" = "writ" }
input_price = 2
output_price = 8.0
cached_input_price = 0.5

[[models]]
id = "openai/gpt-oss-20b"
base_url = "http://127.0.0.1:8000/v1"
input_price = 0.1
output_price = 0.4

[[models]]
id = "local/*"
input_price = 0
output_price = 0
"#;

#[test]
fn each_model_goes_to_the_provider_of_its_closest_entry_and_the_rest_to_openrouter() {
    let (_dir, file) = toml_file(TWO_PROVIDERS);
    let s = load(Some(&file), &[("OPENAI_KEY", "sk-proj-abcdef123456")]).unwrap();
    let p = &s.models.providers;
    assert_eq!(p.remotes.len(), 3, "the default and two of [[models]]");
    assert_eq!(p.remote_of("openai/gpt-4.1"), Some(1));
    assert_eq!(
        p.remote_of("openai/gpt-oss-20b"),
        Some(2),
        "the id beats the prefix"
    );
    assert_eq!(
        p.remote_of("anthropic/claude-x"),
        Some(0),
        "no entry: OpenRouter"
    );
    assert_eq!(
        p.remote_of("local/smollm2-135m@t0.8,s1"),
        None,
        "the embedded engine"
    );
    assert_eq!(p.remotes[1].base_url, "https://api.openai.example/v1");
    assert_eq!(p.remotes[1].key_var.as_deref(), Some("OPENAI_KEY"));
    assert!(p.remotes[1].key.is_some());
    assert_eq!(
        p.remotes[1].headers.0,
        vec![("OpenAI-Project".to_string(), "writ".to_string())]
    );
    assert!(p.remotes[2].key.is_none() && !p.remotes[2].key_missing());
    assert_eq!(
        p.price_of("openai/gpt-4.1"),
        Some(Price {
            input: 2.0,
            output: 8.0,
            cached_input: Some(0.5)
        })
    );
    assert_eq!(p.price_of("openai/gpt-oss-20b").unwrap().input, 0.1);
    assert_eq!(p.price_of("local/smollm2-135m").unwrap().output, 0.0);
    assert_eq!(p.price_of("anthropic/claude-x"), None);
    assert!(s.models.remote_in_use(0) && s.models.remote_in_use(1) && s.models.remote_in_use(2));
}

#[test]
fn the_variable_holds_the_same_entries_as_json_and_wins_over_the_file() {
    let json = r#"[{"id": "vllm/*", "base_url": "http://127.0.0.1:8000/v1", "input_price": 1, "output_price": 2}]"#;
    let (_dir, file) = toml_file(TWO_PROVIDERS);
    let s = load(
        Some(&file),
        &[("WRIT_MODEL_PROVIDERS", json), ("CODE_LIST", "vllm/coder")],
    )
    .unwrap();
    let p = &s.models.providers;
    assert_eq!(p.remotes.len(), 2);
    assert_eq!(p.remote_of("vllm/coder"), Some(1));
    assert_eq!(
        p.remote_of("openai/gpt-4.1"),
        Some(0),
        "the file's entries are not read"
    );
}

#[test]
fn a_bad_entry_is_refused_naming_its_place_and_its_field() {
    for (entries, says) in [
        (r#"{"id": "x"}"#, "must be a JSON array of objects"),
        (r#"["x"]"#, "[[models]] #1: must be a table"),
        (
            r#"[{"id": "a/b", "input_price": 1, "output_price": 1}, {"id": "c/*", "base_url": "ftp://h/v1"}]"#,
            "[[models]] #2: base_url must be an http(s) URL, not ftp:",
        ),
        (
            r#"[{"id": "c/*", "base_url": "not a url"}]"#,
            "[[models]] #1: base_url must be an http(s) URL",
        ),
        (
            r#"[{"id": "c/*", "base_uri": "http://h/v1"}]"#,
            "[[models]] #1: unknown field `base_uri` (the fields: id, base_url",
        ),
        (
            r#"[{"id": "c/*", "base_url": "http://h/v1", "api_key": "sk-1"}]"#,
            "`api_key`: a key never goes in the configuration",
        ),
        (
            r#"[{"id": "c/*", "base_url": "http://h/v1", "api_key_env": "sk-live-123"}]"#,
            "api_key_env must name the environment variable",
        ),
        (
            r#"[{"id": "c/*", "base_url": "http://u:pw@h/v1"}]"#,
            "base_url must not carry credentials",
        ),
        (
            r#"[{"id": "c/*", "input_price": 1}]"#,
            "input_price and output_price go together",
        ),
        (
            r#"[{"id": "c/*", "cached_input_price": 1}]"#,
            "cached_input_price needs input_price and output_price",
        ),
        (
            r#"[{"id": "c/*", "input_price": -1, "output_price": 1}]"#,
            "input_price must be a number of at least 0",
        ),
        (
            r#"[{"id": "c/*", "input_price": "1", "output_price": 1}]"#,
            "input_price must be a number",
        ),
        (r#"[{"id": "c/*"}]"#, "gives neither base_url nor a price"),
        (
            r#"[{"id": "c/*", "api_key_env": "K", "input_price": 1, "output_price": 1}]"#,
            "api_key_env needs base_url",
        ),
        (
            r#"[{"id": "local/*", "base_url": "http://h/v1", "input_price": 1, "output_price": 1}]"#,
            "base_url must be absent: a local/… id is served by the embedded engine",
        ),
        (
            r#"[{"id": "local/llama-70b", "input_price": 1, "output_price": 1}]"#,
            "'local/llama-70b' is not a model writ embeds",
        ),
        (
            r#"[{"base_url": "http://h/v1"}]"#,
            "[[models]] #1: id is missing",
        ),
        (
            r#"[{"id": "*/x", "base_url": "http://h/v1"}]"#,
            "`*` may only end an id",
        ),
        (
            r#"[{"id": "c/*", "base_url": "http://h/v1"}, {"id": "c/*", "base_url": "http://i/v1"}]"#,
            "[[models]] #2: id 'c/*' is given by #1 already",
        ),
        (
            r#"[{"id": "c/*", "base_url": "http://h/v1", "headers": {"Authorization": "Bearer x"}}]"#,
            "headers may not set Authorization",
        ),
        (
            r#"[{"id": "c/*", "base_url": "http://h/v1", "headers": {"bad name": "x"}}]"#,
            "'bad name' is not an HTTP header name",
        ),
    ] {
        let err = load(None, &[("WRIT_MODEL_PROVIDERS", entries)]).unwrap_err();
        assert!(
            err.starts_with("WRIT_MODEL_PROVIDERS: ") && err.contains(says),
            "{entries}: {err}"
        );
        assert!(
            !err.contains("sk-1") && !err.contains("sk-live-123") && !err.contains("pw"),
            "{err}"
        );
    }
}

#[test]
fn writ_toml_refuses_models_that_are_not_an_array_of_tables_and_names_a_bad_field() {
    let (_dir, file) = toml_file("models = 3\n");
    let err = load(Some(&file), &[]).unwrap_err();
    assert!(err.contains("`models` must be an array of tables"), "{err}");
    let (_dir, file) = toml_file("models = [\"openai/*\"]\n");
    let err = load(Some(&file), &[]).unwrap_err();
    assert!(err.contains("`models` must be an array of tables"), "{err}");
    let (_dir, file) = toml_file(
        "[[models]]\nid = \"a/*\"\nbase_url = \"http://h/v1\"\n\n[[models]]\nid = \"b/*\"\nbase_url = \"mailto:x\"\n",
    );
    let err = load(Some(&file), &[]).unwrap_err();
    assert!(
        err.contains("[[models]] #2: base_url must be an http(s) URL"),
        "{err}"
    );
}

#[test]
fn the_key_is_read_from_the_environment_only_and_never_shown() {
    let (_dir, file) = toml_file(
        "code_list = [\"self/m\"]\nopenai_key = \"sk-in-the-file\"\n\n[[models]]\nid = \"self/*\"\nbase_url = \"http://h/v1\"\napi_key_env = \"OPENAI_KEY\"\n",
    );
    let err = load(Some(&file), &[]).unwrap_err();
    assert!(err.contains("`openai_key` is not a setting"), "{err}");

    let (_dir, file) = toml_file(
        "code_list = [\"self/m\"]\n\n[[models]]\nid = \"self/*\"\nbase_url = \"http://h/v1\"\napi_key_env = \"SELF_KEY\"\nheaders = { \"X-Gateway-Token\" = \"tok-hidden-value\" }\n",
    );
    let s = load(Some(&file), &[("SELF_KEY", "sk-self-supersecret")]).unwrap();
    let shown = format!("{s:?} {:?}", s.models.providers);
    assert!(!shown.contains("supersecret"), "{shown}");
    assert!(!shown.contains("tok-hidden-value"), "{shown}");
    assert!(
        shown.contains("SELF_KEY") && shown.contains("X-Gateway-Token"),
        "{shown}"
    );
    assert_eq!(s.models.problem(), None);
}

#[test]
fn a_key_variable_an_entry_names_but_that_is_unset_is_the_problem_named_by_it() {
    let entries = r#"[{"id": "self/*", "base_url": "http://h/v1", "api_key_env": "SELF_KEY"}]"#;
    let s = load(
        None,
        &[
            ("WRIT_MODEL_PROVIDERS", entries),
            ("CODE_LIST", "self/m,openai/x"),
            ("OPENROUTER_API_KEY", "sk-or-x"),
        ],
    )
    .unwrap();
    let problem = s.models.problem().unwrap();
    assert!(
        problem.contains("SELF_KEY is not set") && problem.contains("http://h/v1 serves self/m"),
        "{problem}"
    );
    assert!(
        !s.models
            .provider_key_missing_for(Some(&["openai/x".to_string()])),
        "a batch asking only OpenRouter's models needs only its key"
    );
}

#[test]
fn entries_naming_the_same_endpoint_key_and_headers_share_one_provider() {
    let entries = r#"[
        {"id": "a/*", "base_url": "http://h/v1/", "api_key_env": "K"},
        {"id": "b/*", "base_url": "http://h/v1", "api_key_env": "K"},
        {"id": "c/*", "base_url": "http://h/v1", "api_key_env": "OTHER"},
        {"id": "d/*", "base_url": "https://openrouter.ai/api/v1", "api_key_env": "OPENROUTER_API_KEY"}
    ]"#;
    let s = load(None, &[("WRIT_MODEL_PROVIDERS", entries)]).unwrap();
    let p = &s.models.providers;
    assert_eq!(p.remote_of("a/x"), p.remote_of("b/x"));
    assert_ne!(p.remote_of("a/x"), p.remote_of("c/x"));
    assert_eq!(p.remote_of("d/x"), Some(0), "the default provider itself");
}

#[test]
fn with_refuse_start_up_names_every_configured_model_that_would_carry_no_cost() {
    let entries = r#"[
        {"id": "self/*", "base_url": "http://127.0.0.1:8000/v1"},
        {"id": "self/priced", "base_url": "http://127.0.0.1:8000/v1", "input_price": 1, "output_price": 2}
    ]"#;
    let configured = [
        ("WRIT_MODEL_PROVIDERS", entries),
        ("CODE_LIST", "self/priced,self/free,openai/gpt-4.1"),
        ("CODE_MODEL", "local/smollm2-135m"),
        ("WRIT_TEST_MODELS", "self/writer"),
        ("WRIT_ALLOWED_MODELS", "self/priced,self/extra"),
        ("OPENROUTER_API_KEY", "sk-or-x"),
    ];
    assert!(
        load(None, &configured).is_ok(),
        "counted by tokens by default"
    );
    let mut refusing = configured.to_vec();
    refusing.push(("WRIT_UNPRICED_MODELS", "refuse"));
    let err = load(None, &refusing).unwrap_err();
    assert!(err.starts_with("WRIT_UNPRICED_MODELS: refuse"), "{err}");
    for named in [
        "CODE_LIST self/free (http://127.0.0.1:8000/v1)",
        "CODE_MODEL local/smollm2-135m (the embedded engine)",
        "WRIT_TEST_MODELS self/writer",
        "WRIT_ALLOWED_MODELS self/extra",
    ] {
        assert!(err.contains(named), "{named}: {err}");
    }
    for priced in ["self/priced", "openai/gpt-4.1"] {
        assert!(!err.contains(&format!("{priced} (")), "{priced}: {err}");
    }

    // OpenRouter proper reports its cost; a server behind OPENROUTER_BASE_URL does not.
    let behind = [
        ("OPENROUTER_BASE_URL", "http://127.0.0.1:9/v1"),
        ("CODE_LIST", "openai/gpt-4.1"),
        ("WRIT_UNPRICED_MODELS", "refuse"),
    ];
    let err = load(None, &behind).unwrap_err();
    assert!(
        err.contains("CODE_LIST openai/gpt-4.1 (http://127.0.0.1:9/v1)"),
        "{err}"
    );
    let mut priced = behind.to_vec();
    priced.push((
        "WRIT_MODEL_PROVIDERS",
        r#"[{"id": "openai/*", "input_price": 2, "output_price": 8}]"#,
    ));
    assert!(load(None, &priced).is_ok());
    let err = load(None, &[("WRIT_UNPRICED_MODELS", "never")]).unwrap_err();
    assert!(err.starts_with("WRIT_UNPRICED_MODELS:"), "{err}");
}
