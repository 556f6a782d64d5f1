//! Settings values that may hold a secret and must never print it.

use std::fmt;
use std::ops::Deref;

/// `DATABASE_URL`, which may carry a password (`postgres://user:pw@host/db`, `?password=`).
/// `Debug` shows it with the password replaced; the full URL is reached only by dereferencing,
/// which is what connecting needs.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }
}

impl Deref for DatabaseUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&writ_store::redact_url(&self.0), f)
    }
}

impl PartialEq<&str> for DatabaseUrl {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password_and_keeps_the_rest() {
        let url = DatabaseUrl::new("postgres://writ:s3cr3t@db:5432/writ?sslpassword=p4ss");
        let shown = format!("{url:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("p4ss"),
            "{shown}"
        );
        assert!(shown.contains("db:5432/writ"), "{shown}");
        assert_eq!(
            &*url,
            "postgres://writ:s3cr3t@db:5432/writ?sslpassword=p4ss"
        );
    }
}
