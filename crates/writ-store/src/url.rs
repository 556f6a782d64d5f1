//! Database URLs as text: hiding their secrets in messages, and the small edits tests need.
//!
//! Parsed by hand rather than with a URL crate because the job is narrow (find the userinfo and
//! the query) and must never fail: a URL too odd to parse is still redacted as well as possible.

use writ_core::StoreError;

/// Query parameters that carry a secret in a PostgreSQL URL.
const SECRET_PARAMS: [&str; 2] = ["password", "sslpassword"];

/// The parts of a URL, as byte ranges of the original string.
struct Parts<'a> {
    /// Everything up to and including `://` (empty when there is none).
    head: &'a str,
    authority: &'a str,
    path: &'a str,
    /// From `?` (inclusive) to the end, or empty.
    tail: &'a str,
}

fn split(url: &str) -> Parts<'_> {
    let Some(scheme_end) = url.find("://") else {
        let (path, tail) = url.split_at(url.find('?').unwrap_or(url.len()));
        return Parts {
            head: "",
            authority: "",
            path,
            tail,
        };
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(authority_len);
    let (path, tail) = rest.split_at(rest.find('?').unwrap_or(rest.len()));
    Parts {
        head,
        authority,
        path,
        tail,
    }
}

/// `url` with any password replaced by `***`, both in the userinfo (`user:pw@host`) and in
/// `password=`/`sslpassword=` query parameters. Everything else is kept so the message still says
/// which host and database were meant.
pub fn redact_url(url: &str) -> String {
    let parts = split(url);
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.head);
    match parts.authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = parts.authority.split_at(at);
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(host);
        }
        None => out.push_str(parts.authority),
    }
    out.push_str(parts.path);
    out.push_str(&redact_query(parts.tail));
    out
}

fn redact_query(tail: &str) -> String {
    let Some(query) = tail.strip_prefix('?') else {
        return tail.to_owned();
    };
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _)) if is_secret_param(key) => format!("{key}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("?{}{fragment}", params.join("&"))
}

/// Whether the URL's query sets `key` (case-insensitive), whatever its value.
pub(crate) fn sets_param(url: &str, key: &str) -> bool {
    let parts = split(url);
    let Some(query) = parts.tail.strip_prefix('?') else {
        return false;
    };
    query[..query.find('#').unwrap_or(query.len())]
        .split('&')
        .any(|param| {
            param
                .split_once('=')
                .map_or(param, |(k, _)| k)
                .eq_ignore_ascii_case(key)
        })
}

/// A host on this machine: a loopback name or address, or a Unix socket directory.
pub(crate) fn is_local_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.starts_with('/')
        || host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn is_secret_param(key: &str) -> bool {
    SECRET_PARAMS
        .iter()
        .any(|secret| key.eq_ignore_ascii_case(secret))
}

/// The secrets in `url`, raw and percent-decoded, so that they can be scrubbed from text a driver
/// produced (which may quote the URL or a decoded part of it).
fn secrets(url: &str) -> Vec<String> {
    let parts = split(url);
    let mut found = Vec::new();
    if let Some(at) = parts.authority.rfind('@')
        && let Some((_, password)) = parts.authority[..at].split_once(':')
    {
        found.push(password.to_owned());
    }
    if let Some(query) = parts.tail.strip_prefix('?') {
        let query = &query[..query.find('#').unwrap_or(query.len())];
        for param in query.split('&') {
            if let Some((key, value)) = param.split_once('=')
                && is_secret_param(key)
            {
                found.push(value.to_owned());
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|s| percent_decode(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    // Longest first, so a secret that contains another is replaced whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

/// The error for a `DATABASE_URL` that `backend`'s driver cannot parse.
pub(crate) fn unusable_url(backend: &str, url: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Other(scrub(
        &format!(
            "DATABASE_URL {} is not a usable {backend} URL: {err}",
            redact_url(url)
        ),
        url,
    ))
}

/// The error for a database that did not answer the start-up probe. Whatever the cause (refused,
/// auth, no such database, an unwritable file), start-up cannot go on and an operator has to act:
/// that is "unavailable", not a bug in a statement.
pub(crate) fn no_connection(doing: &str, url: &str, cause: &str) -> StoreError {
    StoreError::Unavailable(scrub(&format!("{doing} {}: {cause}", redact_url(url)), url))
}

/// `message` with every secret of `url` replaced by `***`.
pub(crate) fn scrub(message: &str, url: &str) -> String {
    secrets(url)
        .iter()
        .fold(message.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "***")
        })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Names the scheme of a URL that was refused, without echoing anything that could be a secret
/// (a libpq `key=value` string, say, would otherwise be printed whole).
pub(crate) fn describe_scheme(url: &str) -> String {
    let scheme = url.trim_start().split(':').next().unwrap_or_default();
    let plausible = !scheme.is_empty()
        && scheme.len() <= 20
        && url.trim_start().len() > scheme.len()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if plausible {
        format!("got scheme {scheme:?}")
    } else {
        "got a value without a URL scheme".to_owned()
    }
}

/// `url` pointing at database `name` instead of the one it names (query parameters kept).
pub(crate) fn with_database(url: &str, name: &str) -> String {
    let parts = split(url);
    format!("{}{}/{}{}", parts.head, parts.authority, name, parts.tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_is_found_only_when_the_query_sets_it() {
        assert!(sets_param("postgres://h/db?sslmode=require", "sslmode"));
        assert!(sets_param(
            "postgres://h/db?a=1&SSLMode=disable#x",
            "sslmode"
        ));
        assert!(!sets_param("postgres://h/db?sslrootcert=x", "sslmode"));
        assert!(!sets_param("postgres://h/db", "sslmode"));
    }

    #[test]
    fn only_this_machine_counts_as_local() {
        for host in [
            "localhost",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "[::1]",
            "/var/run/postgresql",
        ] {
            assert!(is_local_host(host), "{host}");
        }
        for host in ["db.internal", "10.0.0.5", "localhost.example.com", "::2"] {
            assert!(!is_local_host(host), "{host}");
        }
    }

    #[test]
    fn a_password_in_the_userinfo_is_replaced() {
        assert_eq!(
            redact_url("postgres://writ:s3cr%40t@db.internal:5432/audit?sslmode=require"),
            "postgres://writ:***@db.internal:5432/audit?sslmode=require"
        );
    }

    #[test]
    fn a_url_without_a_password_is_unchanged() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgresql://localhost/audit",
            "sqlite:///var/lib/writ/audit.db",
            "sqlite::memory:",
            "sqlite:audit.db?mode=rwc",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn a_password_query_parameter_is_replaced() {
        assert_eq!(
            redact_url("postgres://writ@db/audit?password=hunter2&sslmode=require&SSLPassword=x"),
            "postgres://writ@db/audit?password=***&sslmode=require&SSLPassword=***"
        );
    }

    #[test]
    fn an_at_sign_in_the_password_does_not_leak_its_tail() {
        assert_eq!(
            redact_url("postgres://u:p@ss@host/db"),
            "postgres://u:***@host/db"
        );
    }

    #[test]
    fn scrub_removes_raw_and_decoded_passwords() {
        let url = "postgres://writ:s3cr%40t@db/audit?password=other";
        let text = scrub("failed for s3cr%40t, s3cr@t and other", url);
        assert_eq!(text, "failed for ***, *** and ***");
    }

    #[test]
    fn an_unknown_scheme_is_named_but_a_dsn_is_not_echoed() {
        assert_eq!(describe_scheme("mysql://u:p@h/db"), "got scheme \"mysql\"");
        assert_eq!(
            describe_scheme("host=db password=hunter2"),
            "got a value without a URL scheme"
        );
    }

    #[test]
    fn with_database_swaps_only_the_path() {
        assert_eq!(
            with_database(
                "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
                "writ_test_1"
            ),
            "postgres://postgres@127.0.0.1:5432/writ_test_1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "d"), "postgres://h/d");
    }
}
