//! Graceful shutdown: the first SIGTERM or SIGINT flips a watch channel every task can await.

use tokio::sync::watch;

/// A cloneable shutdown signal.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal that fires only when [`Shutdown::trigger`] is called.
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Self {
            rx,
            tx: std::sync::Arc::new(tx),
        }
    }

    /// A signal that also fires on SIGTERM or SIGINT. Must be called inside a tokio runtime.
    pub fn on_signals() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let this = Self::new();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let trigger = this.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutting down");
            trigger.trigger();
        });
        Ok(this)
    }

    /// Fires the signal.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// True once fired.
    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    /// An owned future that completes when the signal fires (for APIs such as
    /// `Controller::graceful_shutdown_on` that need `'static`).
    pub fn signaled(&self) -> impl std::future::Future<Output = ()> + Send + Sync + use<> {
        let mut rx = self.rx.clone();
        async move {
            let _ = rx.wait_for(|fired| *fired).await;
        }
    }

    /// Completes when the signal fires.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        // An error means every sender is gone, which cannot happen while `self` holds one.
        let _ = rx.wait_for(|fired| *fired).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_completes_after_trigger() {
        let s = Shutdown::new();
        assert!(!s.is_triggered());
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.wait().await }
        });
        s.trigger();
        waiter.await.unwrap();
        assert!(s.is_triggered());
    }
}
