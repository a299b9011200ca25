//! WAL archiving: `archive.env` (read by the archive_command wrapper) from the Cluster's plugin
//! entry, its ObjectStore and Secrets, and the archive-delay control.

use super::instance::Instance;
use super::object_store::resolve_object_store;
use super::spec::{Controls, plugin_entry};
use crate::pg;

impl Instance {
    /// Writes (or removes) `archive.env` from the Cluster's plugin entry, its ObjectStore and
    /// Secrets, and the archive-delay control; returns the error that keeps archiving off.
    pub(super) fn apply_archive_config(&self) -> Option<String> {
        let cluster = self.cluster()?;
        let controls = Controls::of(&cluster);
        let entry = plugin_entry(&cluster).filter(|(_, _, archiver)| *archiver);
        let Some((store, server_name, _)) = entry else {
            self.dir.remove("archive.env");
            return None;
        };
        let resolved = resolve_object_store(
            &self.shared.object_stores,
            &self.shared.secrets,
            &self.ns,
            &store,
        );
        let target = resolved.and_then(|r| {
            self.shared
                .target(&self.dir, &store, &r, &server_name, &r.wal_args)
        });
        match target {
            Ok(t) => {
                let text = t.env_file(controls.archive_delay);
                let current =
                    std::fs::read_to_string(self.dir.root.join("archive.env")).unwrap_or_default();
                if current != text
                    && let Err(e) = self.dir.write_private(self.tc(), "archive.env", &text)
                {
                    return Some(e.to_string());
                }
                None
            }
            Err(e) => {
                // Without a usable configuration every archive attempt fails, as it does when
                // the plugin cannot read its ObjectStore.
                let text = format!(
                    "echo {} >&2\nexit 1\n",
                    pg::shell_quote(&format!("ERROR: {e}"))
                );
                let _ = self.dir.write_private(self.tc(), "archive.env", &text);
                Some(e)
            }
        }
    }
}
