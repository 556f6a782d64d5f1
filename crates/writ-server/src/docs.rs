//! The parts of the docs made from the code, so they cannot drift from it: each settings table
//! (`<!-- settings: GROUP -->`, from [`crate::config::declared`]) and each scope's routes
//! (`<!-- routes: SCOPE -->`, from the route table and the OpenAPI document's summaries). A doc
//! keeps its prose; what
//! lies between a marker and `<!-- /generated -->` is replaced by [`splice`]. `scripts/docs`
//! rewrites the checked-in docs, and a test fails while one differs from what [`splice`] makes.

use crate::access::Access;
use crate::config::declared::{self, DefaultValue, Group, InFile};

const END: &str = "<!-- /generated -->";

/// `doc` with every generated block made anew; an unknown marker or one left open is an error
/// naming it.
pub fn splice(doc: &str) -> Result<String, String> {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(start) = rest.find("<!-- ") {
        let (before, from_marker) = rest.split_at(start);
        out.push_str(before);
        let Some(close) = from_marker.find("-->") else {
            return Err("a comment `<!--` is never closed".into());
        };
        let marker = &from_marker[..close + 3];
        let Some(content) = generated(marker)? else {
            out.push_str(marker);
            rest = &from_marker[close + 3..];
            continue;
        };
        let Some(end) = from_marker.find(END) else {
            return Err(format!("{marker} has no {END} after it"));
        };
        out.push_str(marker);
        out.push('\n');
        out.push_str(&content);
        out.push_str(END);
        rest = &from_marker[end + END.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What `marker` stands for, when it is a generated block's.
fn generated(marker: &str) -> Result<Option<String>, String> {
    let inner = marker
        .trim_start_matches("<!--")
        .trim_end_matches("-->")
        .trim();
    let Some((kind, argument)) = inner.split_once(':') else {
        return Ok(None);
    };
    match kind.trim() {
        "settings" => {
            let key = argument.trim();
            let group = Group::ALL
                .into_iter()
                .find(|g| g.key() == key)
                .ok_or_else(|| format!("{marker}: no settings group {key:?}"))?;
            Ok(Some(settings_table(group)))
        }
        "routes" => {
            let scope = argument.trim();
            let known = ["open", "read", "write", "run", "admin", "per-tool"];
            if !known.contains(&scope) {
                return Err(format!("{marker}: no access {scope:?}; one of {known:?}"));
            }
            Ok(Some(routes_table(scope)))
        }
        _ => Ok(None),
    }
}

/// What a route's access is called in a marker.
fn access_key(access: Access) -> &'static str {
    match access {
        Access::Open => "open",
        Access::Scope(scope) => scope.as_str(),
        Access::PerTool => "per-tool",
    }
}

/// Every route whose access is `scope`, in the route table's order, with its OpenAPI summary.
pub fn routes_table(scope: &str) -> String {
    let document = crate::openapi::document();
    let mut table = String::from("| route | what it does |\n|---|---|\n");
    for route in crate::routes::api_routes() {
        if access_key(route.access) != scope {
            continue;
        }
        let path = route.openapi_path();
        let summary =
            document["paths"][path.as_str()][route.method.to_lowercase().as_str()]["summary"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        table.push_str(&format!(
            "| `{} {}` | {} |\n",
            route.method,
            cell(&path),
            cell(&summary)
        ));
    }
    table
}

/// The table of one group's settings, in declaration order.
pub fn settings_table(group: Group) -> String {
    let mut table = String::from("| setting | type | default | meaning |\n|---|---|---|---|\n");
    for setting in declared::SETTINGS.iter().filter(|s| s.group == group) {
        let name = match setting.in_file {
            InFile::Lower => format!("`{}`", setting.name),
            InFile::Key(key) => format!("`{}` (`[{key}]` in writ.toml)", setting.name),
            InFile::No(_) => format!("`{}` (environment only)", setting.name),
        };
        let default = match setting.default {
            DefaultValue::Unset => "unset".to_string(),
            DefaultValue::Literal(value) => format!("`{value}`"),
            DefaultValue::Derived(words) => words.to_string(),
        };
        table.push_str(&format!(
            "| {name} | {} | {} | {} |\n",
            cell(&setting.kind.describe()),
            cell(&default),
            cell(setting.meaning)
        ));
    }
    table
}

/// Text a table cell can hold: a `|` would end it.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_made_anew_and_the_prose_around_it_is_kept() {
        let doc = "intro\n<!-- settings: sessions -->\nstale rows\n<!-- /generated -->\nafter\n<!-- a comment -->\n";
        let out = splice(doc).unwrap();
        assert!(out.starts_with("intro\n<!-- settings: sessions -->\n| setting |"));
        assert!(out.contains("`WRITE_SESSION_MAX_OPEN`"), "{out}");
        assert!(!out.contains("stale rows"));
        assert!(out.ends_with("<!-- /generated -->\nafter\n<!-- a comment -->\n"));
        assert_eq!(splice(&out).unwrap(), out, "splicing twice changes nothing");
    }

    #[test]
    fn every_route_is_in_the_table_of_its_access() {
        let all: String = ["open", "read", "write", "run", "admin", "per-tool"]
            .iter()
            .map(|scope| routes_table(scope))
            .collect();
        for route in crate::routes::api_routes() {
            let row = format!("| `{} {}` |", route.method, route.openapi_path());
            assert_eq!(all.matches(&row).count(), 1, "{row}");
        }
    }

    #[test]
    fn an_unknown_group_or_an_open_block_is_named() {
        let err = splice("<!-- settings: colours -->\n<!-- /generated -->").unwrap_err();
        assert!(err.contains("colours"), "{err}");
        let err = splice("<!-- settings: server -->\nrows").unwrap_err();
        assert!(err.contains("<!-- /generated -->"), "{err}");
    }
}
