//! `docker compose up` as written, without a Docker engine: the `writ` service's environment
//! from docker-compose.yml (each `${VAR:-default}` read as Compose reads it with nothing set),
//! over the image's `ENV`, run as the image's `ENTRYPOINT` + `CMD` from the Dockerfile, against a
//! fresh PostgreSQL database. Only what Docker itself provides is stood in for: the `postgres`
//! service (a fresh database on the test server), the volumes and the working directory (a temp
//! dir), and the published port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{client_with, free_port, wait_until_healthy};

fn repo_file(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(name),
    )
    .unwrap()
}

/// The final stage's `ENV`, `WORKDIR` and `ENTRYPOINT` + `CMD` (exec form).
struct Image {
    env: BTreeMap<String, String>,
    workdir: String,
    command: Vec<String>,
}

fn image() -> Image {
    let dockerfile = repo_file("Dockerfile");
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    let (mut env, mut workdir, mut entrypoint, mut cmd) =
        (BTreeMap::new(), String::from("/"), Vec::new(), Vec::new());
    for line in last_stage.lines() {
        let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
        match instruction {
            "ENV" => {
                for pair in rest.split_whitespace() {
                    let (k, v) = pair.split_once('=').expect("ENV KEY=value");
                    env.insert(k.to_string(), v.to_string());
                }
            }
            "WORKDIR" => workdir = rest.trim().to_string(),
            "ENTRYPOINT" => entrypoint = serde_json::from_str(rest).expect("exec form"),
            "CMD" => cmd = serde_json::from_str(rest).expect("exec form"),
            _ => {}
        }
    }
    entrypoint.extend(cmd);
    Image {
        env,
        workdir,
        command: entrypoint,
    }
}

/// `${VAR:-default}` and `${VAR}` as Compose reads them from an environment that sets nothing.
fn interpolate(value: &str) -> String {
    let re = regex::Regex::new(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}").unwrap();
    re.replace_all(value, |c: &regex::Captures| {
        c.get(1).map_or("", |m| m.as_str()).to_string()
    })
    .into_owned()
}

/// The `writ` service: its environment, command (if it sets one), volumes' container paths and
/// healthcheck.
struct Service {
    env: BTreeMap<String, String>,
    command: Option<Vec<String>>,
    volumes: Vec<String>,
    healthcheck: String,
}

fn compose_service(name: &str) -> Service {
    let doc: yaml_serde::Value = yaml_serde::from_str(&repo_file("docker-compose.yml")).unwrap();
    let service = &doc["services"][name];
    let env = service["environment"]
        .as_mapping()
        .expect("environment as a mapping")
        .iter()
        .map(|(k, v)| {
            let v = match v {
                yaml_serde::Value::String(s) => s.clone(),
                other => yaml_serde::to_string(other).unwrap().trim().to_string(),
            };
            (k.as_str().unwrap().to_string(), interpolate(&v))
        })
        .collect();
    let command = service["command"].as_sequence().map(|items| {
        items
            .iter()
            .map(|i| i.as_str().unwrap().to_string())
            .collect()
    });
    let volumes = service["volumes"]
        .as_sequence()
        .map(|items| {
            items
                .iter()
                .map(|v| v.as_str().unwrap().split(':').nth(1).unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    let healthcheck = service["healthcheck"]["test"][1]
        .as_str()
        .expect("a CMD-SHELL healthcheck")
        .to_string();
    Service {
        env,
        command,
        volumes,
        healthcheck,
    }
}

/// The process `docker compose up` would run for `writ`, with Docker's parts stood in for.
fn compose_writ(root: &Path, database_url: &str, port: u16, log: &Path) -> std::process::Command {
    let image = image();
    let service = compose_service("writ");
    let mut env = image.env.clone();
    env.extend(service.env.clone());

    // The container's paths (volumes, the working directory) live under `root`.
    let mut mounts: Vec<&str> = service.volumes.iter().map(String::as_str).collect();
    mounts.push(&image.workdir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    let host_path = |value: &str| -> Option<PathBuf> {
        mounts.iter().find_map(|m| {
            value.strip_prefix(m).map(|rest| {
                root.join(m.trim_start_matches('/'))
                    .join(rest.trim_start_matches('/'))
            })
        })
    };
    for value in env.values_mut() {
        if let Some(path) = host_path(value) {
            *value = path.display().to_string();
        }
    }
    let url = env.get("DATABASE_URL").expect("compose sets DATABASE_URL");
    assert!(
        url.contains("@postgres:5432/"),
        "writ reaches the compose file's own postgres service: {url}"
    );
    env.insert("DATABASE_URL".into(), database_url.to_string());
    let addr = env
        .get("WRIT_ADDR")
        .expect("compose sets WRIT_ADDR")
        .clone();
    let (host, _) = addr.rsplit_once(':').unwrap();
    assert_eq!(host, "0.0.0.0", "the container listens on every interface");
    env.insert("WRIT_ADDR".into(), format!("{host}:{port}"));

    let command = service.command.unwrap_or(image.command);
    assert_eq!(command[0], "writ", "the image runs writ");
    let workdir = root.join(image.workdir.trim_start_matches('/'));
    std::fs::create_dir_all(&workdir).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_writ"));
    cmd.args(&command[1..])
        .current_dir(&workdir)
        .env_clear()
        .envs(&env)
        // What the machine gives every process; the cache is where an earlier run may have put
        // the embedded model, which the compose file's defaults fetch on first start.
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    if let Ok(cache) = std::env::var("XDG_CACHE_HOME") {
        cmd.env("XDG_CACHE_HOME", cache);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_compose_up_serves_on_a_fresh_database_with_the_key_it_made_at_first_start() {
    let root = tempfile::tempdir().unwrap();
    let database_url = writ_store::testing::fresh_postgres_url().await;
    let port = free_port();
    let log = root.path().join("writ.log");
    let mut writ = compose_writ(root.path(), &database_url, port, &log)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    wait_until_healthy(&base, &log).await;

    let key_file = root.path().join("data/keys/admin.key");
    let key = std::fs::read_to_string(&key_file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\n{}",
            key_file.display(),
            std::fs::read_to_string(&log).unwrap()
        )
    });
    let key = key.trim().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains(&key), "the key is never logged");
    assert!(logged.contains("WRIT_ADMIN_KEY_FILE"), "{logged}");

    let http = client_with(Duration::from_secs(30));
    let anonymous = http.get(format!("{base}/files")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let put = http
        .put(format!("{base}/files/hello.py?create_dirs=true"))
        .bearer_auth(&key)
        .body("print('hi')\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201, "{}", put.text().await.unwrap());
    assert_eq!(
        std::fs::read_to_string(root.path().join("data/workspace/hello.py")).unwrap(),
        "print('hi')\n",
        "the workspace volume holds the file"
    );

    // The compose file's healthcheck, as Docker runs it inside the container.
    let healthcheck = compose_service("writ")
        .healthcheck
        .replace("127.0.0.1/8080", &format!("127.0.0.1/{port}"));
    let healthy = std::process::Command::new("bash")
        .args(["-c", &healthcheck])
        .status()
        .unwrap();
    assert!(healthy.success(), "the healthcheck passes: {healthcheck}");

    // A restart keeps the key: none is made while one exists.
    writ.kill().unwrap();
    writ.wait().unwrap();
    let log2 = root.path().join("writ-2.log");
    let mut again = compose_writ(root.path(), &database_url, port, &log2)
        .spawn()
        .unwrap();
    wait_until_healthy(&base, &log2).await;
    assert_eq!(std::fs::read_to_string(&key_file).unwrap().trim(), key);
    let listed = http
        .get(format!("{base}/files"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    again.kill().unwrap();
    again.wait().unwrap();
}

#[test]
fn the_compose_files_replicas_wait_for_the_writ_that_makes_the_key() {
    let doc: yaml_serde::Value = yaml_serde::from_str(&repo_file("docker-compose.yml")).unwrap();
    let replica = &doc["services"]["writ-2"];
    assert_eq!(
        replica["depends_on"]["writ"]["condition"].as_str(),
        Some("service_healthy")
    );
    assert!(
        compose_service("writ")
            .env
            .contains_key("WRIT_ADMIN_KEY_FILE"),
        "the first writ makes the key"
    );
}
