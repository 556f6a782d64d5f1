//! Where a write session stands, and the names its states have on the wire and in the store.

use serde::{Deserialize, Serialize};

/// Where a session stands. `AwaitingDoneOrMoreContent` is never stored: it is
/// `AwaitingContent` seen after the idle time with no new chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    AwaitingContent,
    AwaitingDoneOrMoreContent,
    NeedsCorrections,
    Finalizing,
    Done,
    Failed,
    Expired,
}

impl SessionState {
    pub const ALL: [Self; 7] = [
        Self::AwaitingContent,
        Self::AwaitingDoneOrMoreContent,
        Self::NeedsCorrections,
        Self::Finalizing,
        Self::Done,
        Self::Failed,
        Self::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingContent => "awaiting_content",
            Self::AwaitingDoneOrMoreContent => "awaiting_done_or_more_content",
            Self::NeedsCorrections => "needs_corrections",
            Self::Finalizing => "finalizing",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Expired => "expired",
        }
    }

    /// Still waiting on the caller (and so subject to expiry and the open-session bound).
    pub fn is_open(self) -> bool {
        matches!(
            self,
            Self::AwaitingContent | Self::AwaitingDoneOrMoreContent | Self::NeedsCorrections
        )
    }

    /// The states a session is stored in while it is open.
    pub const OPEN_STORED: [Self; 2] = [Self::AwaitingContent, Self::NeedsCorrections];
}

impl std::str::FromStr for SessionState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown write session state: {s}"))
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_name() {
        for state in SessionState::ALL {
            assert_eq!(state.as_str().parse::<SessionState>(), Ok(state));
        }
    }
}
