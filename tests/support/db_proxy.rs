//! A TCP proxy between a test's writ (in-process or as processes) and PostgreSQL, cut and restored
//! to inject a failover. One source for both test crates that use it (`writ-tests` and
//! writ-server's process tests include this file).

/// Fault injection closer to a failover: a TCP proxy between one test's writ and PostgreSQL.
/// [`DbProxy::cut`] drops every connection through it and refuses new ones (connections reset,
/// as when a primary dies); [`DbProxy::restore`] lets them through again. Only the test's own
/// processes go through it, so tests running beside them keep their database.
pub struct DbProxy {
    port: u16,
    cut: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl DbProxy {
    /// A proxy to the server of `database_url`.
    pub async fn start(database_url: &str) -> DbProxy {
        let upstream = database_url
            .split('@')
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("127.0.0.1:5432")
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(tokio::sync::watch::channel(false).0);
        let watch = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if *watch.borrow() {
                    drop(client);
                    continue;
                }
                let mut is_cut = watch.subscribe();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = is_cut.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        DbProxy { port, cut, task }
    }

    /// `database_url` with its server replaced by the proxy.
    pub fn url_for(&self, database_url: &str) -> String {
        let (head, rest) = database_url.split_once('@').unwrap();
        let db = rest.split_once('/').map(|(_, db)| db).unwrap_or("");
        format!("{head}@127.0.0.1:{}/{db}", self.port)
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn restore(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
