//! [`RoutingClient`]: one [`ModelClient`] for the pipeline, two providers behind it. Ids starting
//! with `local/` go to the embedded model, everything else to the remote (OpenRouter/OpenAI-
//! compatible) client, so `CODE_LIST` may even mix the two.

use std::sync::Arc;

use async_trait::async_trait;
use writ_core::ModelClient;
use writ_core::model::{ChatRequest, ChatResponse, ErrorClass, ModelError, ProviderReadiness};

use crate::model_id::is_local;

pub struct RoutingClient {
    /// `None` when the embedded provider is switched off or not built.
    pub local: Option<Arc<dyn ModelClient>>,
    pub remote: Arc<dyn ModelClient>,
    /// Whether any configured model is remote: only then does the remote provider's readiness count.
    pub remote_in_use: bool,
}

#[async_trait]
impl ModelClient for RoutingClient {
    async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
        if !is_local(&req.model) {
            return self.remote.chat(req).await;
        }
        match &self.local {
            Some(local) => local.chat(req).await,
            None => Err(ModelError {
                model: req.model,
                class: ErrorClass::NotFound,
                status: None,
                message: "the embedded model is off (WRIT_LOCAL_MODEL=off, or writ was built without the local-model feature)".into(),
                attempts: 1,
                latency: std::time::Duration::ZERO,
            }),
        }
    }

    fn readiness(&self) -> ProviderReadiness {
        let remote = self.remote.readiness();
        match (&self.local, self.remote_in_use) {
            (Some(local), false) => local.readiness(),
            (Some(local), true) => {
                let local = local.readiness();
                ProviderReadiness {
                    name: format!("{}+{}", local.name, remote.name),
                    ready: local.ready && remote.ready,
                    detail: format!("{}; {}", local.detail, remote.detail),
                }
            }
            (None, _) => remote,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records which models it was asked for; the router's only job is choosing between two.
    struct Recorder {
        name: &'static str,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl ModelClient for Recorder {
        async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, ModelError> {
            self.seen.lock().unwrap().push(req.model);
            Ok(ChatResponse {
                content: self.name.into(),
                ..ChatResponse::default()
            })
        }
        fn readiness(&self) -> ProviderReadiness {
            ProviderReadiness {
                name: self.name.into(),
                ready: self.name == "local",
                detail: format!("{} detail", self.name),
            }
        }
    }

    fn recorder(name: &'static str) -> Arc<Recorder> {
        Arc::new(Recorder {
            name,
            seen: Mutex::new(Vec::new()),
        })
    }

    fn ask(model: &str) -> ChatRequest {
        ChatRequest {
            model: model.into(),
            ..ChatRequest::default()
        }
    }

    #[tokio::test]
    async fn local_ids_go_to_the_embedded_model_and_the_rest_to_the_remote_one() {
        let (local, remote) = (recorder("local"), recorder("remote"));
        let router = RoutingClient {
            local: Some(local.clone()),
            remote: remote.clone(),
            remote_in_use: true,
        };
        for m in [
            "local/smollm2-135m@t0.7",
            "openai/gpt-4.1",
            "localhost/model",
        ] {
            router.chat(ask(m)).await.unwrap();
        }
        assert_eq!(*local.seen.lock().unwrap(), vec!["local/smollm2-135m@t0.7"]);
        assert_eq!(
            *remote.seen.lock().unwrap(),
            vec!["openai/gpt-4.1", "localhost/model"]
        );
    }

    #[tokio::test]
    async fn a_local_id_with_the_embedded_model_off_is_a_permanent_error_naming_the_switch() {
        let router = RoutingClient {
            local: None,
            remote: recorder("remote"),
            remote_in_use: true,
        };
        let err = router.chat(ask("local/smollm2-135m")).await.unwrap_err();
        assert!(err.class.is_permanent());
        assert!(err.message.contains("WRIT_LOCAL_MODEL"), "{err}");
    }

    #[test]
    fn readiness_reports_the_remote_provider_only_when_it_is_in_use() {
        let only_local = RoutingClient {
            local: Some(recorder("local")),
            remote: recorder("remote"),
            remote_in_use: false,
        };
        let r = only_local.readiness();
        assert_eq!((r.name.as_str(), r.ready), ("local", true));
        let mixed = RoutingClient {
            local: Some(recorder("local")),
            remote: recorder("remote"),
            remote_in_use: true,
        };
        let r = mixed.readiness();
        assert_eq!(r.name, "local+remote");
        assert!(!r.ready, "the remote half is not ready");
        assert!(r.detail.contains("remote detail"));
    }
}
