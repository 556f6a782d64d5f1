//! Keeping the API key out of everything we print.
//!
//! We never log the key or the `Authorization` header, but a provider may echo the key back in
//! an error message ("Incorrect API key provided: sk-..."). Every provider message passes
//! through [`Redactor::scrub`] before it reaches a log line or a [`writ_core::model::ModelError`].

use secrecy::{ExposeSecret, SecretString};

pub(crate) const REDACTED: &str = "[REDACTED]";

#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    key: Option<SecretString>,
}

impl Redactor {
    pub fn new(key: Option<SecretString>) -> Self {
        // A key this short would shred every message; it cannot be a real key anyway.
        Self {
            key: key.filter(|k| k.expose_secret().len() >= 8),
        }
    }

    pub fn scrub(&self, text: String) -> String {
        match &self.key {
            Some(key) if text.contains(key.expose_secret()) => {
                text.replace(key.expose_secret(), REDACTED)
            }
            _ => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_replaced_wherever_it_appears() {
        let r = Redactor::new(Some(SecretString::from("sk-or-v1-abcdef123456")));
        assert_eq!(
            r.scrub("Incorrect API key provided: sk-or-v1-abcdef123456.".into()),
            "Incorrect API key provided: [REDACTED]."
        );
        assert_eq!(r.scrub("nothing here".into()), "nothing here");
        assert_eq!(Redactor::new(None).scrub("x".into()), "x");
    }
}
