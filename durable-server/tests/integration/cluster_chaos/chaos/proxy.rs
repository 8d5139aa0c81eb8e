//! A TCP proxy between one node and Postgres that can black-hole the node's database traffic.
//!
//! Black-holed, the proxy stops moving bytes in both directions but keeps every socket open,
//! as a network partition does: the node's statements sit unanswered (its lease renewals
//! too), and no error tells it anything. Bytes already read are held, not dropped; once the
//! proxy heals they are delivered, late — as TCP retransmission would deliver them after a
//! partition ends. A commit sent before the partition thus reaches the database after
//! another node took the shard over, which is exactly the write fencing must refuse.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A running proxy; stops (closing every connection) when dropped.
pub struct Proxy {
    address: SocketAddr,
    blackholed: watch::Sender<bool>,
    tasks: Arc<std::sync::Mutex<JoinSet<()>>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let address = listener.local_addr().expect("proxy address");
        let (blackholed, watch) = watch::channel(false);
        let tasks = Arc::new(std::sync::Mutex::new(JoinSet::new()));
        let acceptor = tokio::spawn(accept(listener, upstream, watch, Arc::clone(&tasks)));
        Self {
            address,
            blackholed,
            tasks,
            acceptor,
        }
    }

    /// Where the node connects.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops forwarding bytes, in both directions, on every connection (new ones included).
    pub fn blackhole(&self) {
        self.blackholed.send_replace(true);
    }

    /// Forwards again, delivering what was held.
    pub fn heal(&self) {
        self.blackholed.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.abort_all();
        }
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    blackholed: watch::Receiver<bool>,
    tasks: Arc<std::sync::Mutex<JoinSet<()>>>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let blackholed = blackholed.clone();
        let Ok(mut tasks) = tasks.lock() else { return };
        // Reap finished connections so the set does not grow with the pool's churn.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            let mut open = blackholed.clone();
            // Black-holed: the connection is not even opened upstream until healed.
            if open.wait_for(|holed| !holed).await.is_err() {
                return;
            }
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            // Either direction ending (a closed socket) ends both.
            tokio::select! {
                () = pump(client_read, server_write, blackholed.clone()) => {}
                () = pump(server_read, client_write, blackholed) => {}
            }
        });
    }
}

/// Copies `from` to `to`, reading nothing and writing nothing while black-holed.
async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut blackholed: watch::Receiver<bool>,
) {
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        if blackholed.wait_for(|holed| !holed).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            // Black-holed while waiting for bytes: stop reading.
            _ = blackholed.wait_for(|holed| *holed) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before the black hole wait for the heal.
        if blackholed.wait_for(|holed| !holed).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use durable_sqlx::sqlx::{self, Connection, PgConnection};

    use super::*;
    use crate::cluster_chaos::chaos::cluster::Database;

    async fn one(conn: &mut PgConnection) -> i32 {
        sqlx::query_scalar("SELECT 1")
            .fetch_one(conn)
            .await
            .expect("query")
    }

    #[tokio::test]
    async fn a_blackholed_connection_stays_open_and_delivers_late() {
        let db = Database::create().await;
        let proxy = Proxy::start(db.upstream).await;
        let mut conn = PgConnection::connect(&db.url_through(proxy.address()))
            .await
            .expect("connect through the proxy");
        assert_eq!(one(&mut conn).await, 1);

        proxy.blackhole();
        let query = tokio::spawn(async move {
            let value = one(&mut conn).await;
            (value, conn)
        });
        // Nothing moves: the query waits, with no error.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!query.is_finished(), "a query got through the black hole");

        proxy.heal();
        let (value, conn) = tokio::time::timeout(Duration::from_secs(10), query)
            .await
            .expect("the held query is answered after the heal")
            .expect("query task");
        assert_eq!(value, 1);
        conn.close().await.expect("close");
    }
}
