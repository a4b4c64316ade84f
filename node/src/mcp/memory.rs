//! What servers spoke, remembered across processes.
//!
//! Mew first asks a server `server/discover` (2026-07-28); a server of the `initialize` era
//! that never answers the probe costs the SDK's whole probe wait (10 s) before Mew falls back.
//! A server that spoke 2025-11-25 or older starts with `initialize` when it is connected again
//! in the same process; this file makes that hold for the next process too (a restarted node,
//! each `mew mcp` command): `<data_dir>/mcp-protocols.json`, by server name and what the entry
//! points at (its URL, or its command and arguments), for [`REMEMBERED_FOR`], after which the
//! server is probed again (it may have been upgraded).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::mcp::{McpServerConfig, McpTransport};

/// The file, in the data directory.
pub(crate) const FILE: &str = "mcp-protocols.json";
/// How long a server is remembered as one of the `initialize` era.
pub(crate) const REMEMBERED_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most servers remembered (the oldest are forgotten first).
const MAX_SERVERS: usize = 1024;
/// The largest file read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The memory of one data directory.
#[derive(Debug)]
pub(crate) struct ProtocolMemory {
    path: PathBuf,
    /// Serializes this process's read-modify-write of the file.
    writing: Mutex<()>,
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Remembered {
    /// By [`key`]: when (seconds since the epoch) the server last spoke `initialize`.
    #[serde(default)]
    initialize: BTreeMap<String, u64>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// The server `name` as configured: its name and what it points at, so that an entry changed
/// to another server is not taken for the old one.
fn key(name: &str, config: &McpServerConfig) -> String {
    match &config.transport {
        McpTransport::Http { url, .. } => format!("{name}\0http\0{url}"),
        McpTransport::Stdio { command, args, .. } => {
            format!("{name}\0stdio\0{command}\0{}", args.join("\0"))
        }
    }
}

impl ProtocolMemory {
    /// The memory of `data_dir` (nothing is read yet).
    pub(crate) fn new(data_dir: &std::path::Path) -> Self {
        Self {
            path: data_dir.join(FILE),
            writing: Mutex::new(()),
        }
    }

    fn read(&self) -> Remembered {
        let Ok(file) = std::fs::File::open(&self.path) else {
            return Remembered::default();
        };
        let mut text = Vec::new();
        if std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_FILE_BYTES), &mut text)
            .is_err()
        {
            return Remembered::default();
        }
        // A damaged file is forgotten: the servers are probed again.
        serde_json::from_slice(&text).unwrap_or_default()
    }

    /// Whether the server `name` spoke the `initialize` era within [`REMEMBERED_FOR`].
    pub(crate) fn spoke_initialize(&self, name: &str, config: &McpServerConfig) -> bool {
        self.read()
            .initialize
            .get(&key(name, config))
            .is_some_and(|at| now().saturating_sub(*at) < REMEMBERED_FOR.as_secs())
    }

    /// Records what the server `name` spoke: the `initialize` era, or not (then it is
    /// forgotten). A file that cannot be written is left as it was: the memory only saves time.
    pub(crate) fn record(&self, name: &str, config: &McpServerConfig, spoke_initialize: bool) {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut remembered = self.read();
        let key = key(name, config);
        let changed = if spoke_initialize {
            remembered.initialize.insert(key, now());
            true
        } else {
            remembered.initialize.remove(&key).is_some()
        };
        if !changed {
            return;
        }
        while remembered.initialize.len() > MAX_SERVERS {
            let oldest = remembered
                .initialize
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(oldest) => remembered.initialize.remove(&oldest),
                None => break,
            };
        }
        let written = serde_json::to_vec_pretty(&remembered)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                if let Some(dir) = self.path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                crate::tools::write_atomic(&self.path, &bytes)
            });
        if let Err(err) = written {
            tracing::debug!(
                server = name,
                "cannot remember what the MCP server spoke: {err}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &str) -> McpServerConfig {
        McpServerConfig {
            transport: McpTransport::Http {
                url: url.to_owned(),
                headers: BTreeMap::new(),
            },
            connect_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(1),
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
            max_restarts: 1,
            protocol: Default::default(),
            sampling: Default::default(),
            elicitation: Default::default(),
            oauth: Default::default(),
            origin: String::new(),
            undefined_vars: Vec::new(),
            warnings: Vec::new(),
            as_written: None,
        }
    }

    #[test]
    fn a_server_of_the_initialize_era_is_remembered_by_the_next_process_until_it_changes() {
        let root = tempfile::tempdir().unwrap();
        // The data directory need not exist yet.
        let data = root.path().join("data");
        let old = http("http://127.0.0.1:9/mcp");
        let memory = ProtocolMemory::new(&data);
        assert!(!memory.spoke_initialize("old", &old));
        memory.record("old", &old, true);
        // Another process reads it.
        let next = ProtocolMemory::new(&data);
        assert!(next.spoke_initialize("old", &old));
        // Another URL, or another name, is another server.
        assert!(!next.spoke_initialize("old", &http("http://127.0.0.1:10/mcp")));
        assert!(!next.spoke_initialize("other", &old));
        // A server that answers discovery now is forgotten.
        next.record("old", &old, false);
        assert!(!ProtocolMemory::new(&data).spoke_initialize("old", &old));
    }

    #[test]
    fn an_old_or_damaged_memory_is_forgotten() {
        let data = tempfile::tempdir().unwrap();
        let old = http("http://127.0.0.1:9/mcp");
        let stale = now() - REMEMBERED_FOR.as_secs() - 1;
        let file = serde_json::json!({"initialize": {key("old", &old): stale}});
        std::fs::write(data.path().join(FILE), file.to_string()).unwrap();
        assert!(!ProtocolMemory::new(data.path()).spoke_initialize("old", &old));
        std::fs::write(data.path().join(FILE), "{not json").unwrap();
        let memory = ProtocolMemory::new(data.path());
        assert!(!memory.spoke_initialize("old", &old));
        memory.record("old", &old, true);
        assert!(memory.spoke_initialize("old", &old));
    }
}
