//! Which etcd the daemon stands on: each member's version, read with the Status RPC when
//! the daemon starts and every [`REFRESH`] after (a member that comes back, or comes back
//! upgraded, is seen within it), and compared with the oldest release of its line that has
//! etcd's own fixes for what the store rests on (docs/operations.md, "etcd versions"):
//! linearizable reads under leader changes and process pauses (etcd#21375, etcd#20418),
//! the replicas' read barrier, and the watch's order and completeness, the replicas'
//! following. A member below it is logged as a warning, said in `/readyz`'s body and in
//! `blocklist_etcd_member_version`; with `--etcd-require-fixed-version` the daemon refuses
//! to start on one.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::members::Members;
use super::{Etcd, EtcdConfig};

/// How often the members' versions are read again.
const REFRESH: Duration = Duration::from_secs(10);

/// The oldest patch release with the fixes, for each release line that has one; a line
/// after the last (3.7 and on) has them all from its first release, a line before the
/// first (3.3 and older) none.
const FIXED: [(u64, u64); 3] = [(4, 42), (5, 28), (6, 9)];

/// [`FIXED`] as operators read it.
pub const MINIMUM: &str = "3.4.42, 3.5.28, 3.6.9 or 3.7.0";

/// A member's version as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberVersion {
    /// The member's endpoint, as `--etcd-endpoints` gives it.
    pub member: String,
    /// What it reported; `None` while it did not answer.
    pub version: Option<String>,
}

impl MemberVersion {
    /// Whether the member answered with a release that lacks the fixes (one that did not
    /// answer is not judged).
    pub fn below_minimum(&self) -> bool {
        self.version.as_deref().is_some_and(|v| !has_fixes(v))
    }
}

/// Whether etcd `version` (`3.6.17`, say) has the read and watch fixes; a version that
/// does not parse has not.
pub fn has_fixes(version: &str) -> bool {
    let mut numbers = version
        .split(['.', '-', '+'])
        .map(|part| part.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (numbers.next(), numbers.next(), numbers.next())
    else {
        return false;
    };
    if major != 3 {
        return major > 3;
    }
    match FIXED.iter().find(|(line, _)| *line == minor) {
        Some((_, first)) => patch >= *first,
        None => minor > FIXED[FIXED.len() - 1].0,
    }
}

/// The warning an operator reads when members run releases without the fixes; `None`
/// when none does.
pub fn warning(versions: &[MemberVersion]) -> Option<String> {
    let below: Vec<String> = versions
        .iter()
        .filter(|v| v.below_minimum())
        .map(|v| {
            format!(
                "{} runs etcd {}",
                v.member,
                v.version.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if below.is_empty() {
        return None;
    }
    Some(format!(
        "{}: older than {MINIMUM}, which fix linearizable reads under leader changes and \
         pauses and the watch's order (replicas may serve stale reads); upgrade etcd \
         (docs/operations.md, \"etcd versions\")",
        below.join(", ")
    ))
}

impl Etcd {
    /// Reads every member's version now (all at once, each within the call deadline),
    /// keeps them for [`Etcd::versions`], logs what changed, and returns them.
    pub fn read_versions(&self) -> Vec<MemberVersion> {
        let reading = read_all(self.members.clone(), self.config.clone());
        // Each read has its own deadline: this one only bounds the wait for them all.
        let read = super::wait_for(self.runtime(), self.config.call_timeout * 2, async move {
            Ok::<_, String>(reading.await)
        })
        .unwrap_or_default();
        self.note_versions(read.clone());
        read
    }

    /// The members' versions as last read.
    pub fn versions(&self) -> Vec<MemberVersion> {
        self.versions.lock().expect("not poisoned").clone()
    }

    /// Reads the versions again every [`REFRESH`] for as long as the connection lives.
    pub fn refresh_versions(self: &Arc<Etcd>) {
        let etcd: Weak<Etcd> = Arc::downgrade(self);
        self.runtime().spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                let Some(etcd) = etcd.upgrade() else { return };
                let read = read_all(etcd.members.clone(), etcd.config.clone()).await;
                etcd.note_versions(read);
            }
        });
    }

    /// Keeps `read`; logs each member whose answer changed: its version, with a warning
    /// when it lacks the fixes. A member that stopped answering keeps the version it last
    /// reported (it most likely comes back on it).
    fn note_versions(&self, read: Vec<MemberVersion>) {
        let mut kept = self.versions.lock().expect("not poisoned");
        if read.is_empty() {
            return; // the reads as a whole ran out of time: nothing learned
        }
        let merged: Vec<MemberVersion> = read
            .into_iter()
            .map(|now| {
                let before = kept.iter().find(|v| v.member == now.member);
                match (&now.version, before) {
                    (None, Some(before)) => before.clone(),
                    _ => now,
                }
            })
            .collect();
        for now in &merged {
            let before = kept.iter().find(|v| v.member == now.member);
            if before == Some(now) || now.version.is_none() {
                continue;
            }
            let version = now.version.as_deref().unwrap_or_default();
            if now.below_minimum() {
                tracing::warn!(
                    member = %now.member,
                    version,
                    minimum = MINIMUM,
                    "this etcd member lacks etcd's fixes for linearizable reads and the watch: \
                     replicas may serve stale reads; upgrade it"
                );
            } else {
                tracing::info!(member = %now.member, version, "etcd member version");
            }
        }
        *kept = merged;
    }
}

/// Every member's Status, each within the call deadline.
async fn read_all(members: Arc<Members>, config: EtcdConfig) -> Vec<MemberVersion> {
    let deadline = config.call_timeout;
    let mut reads = tokio::task::JoinSet::new();
    for (i, url) in config.endpoints.iter().enumerate() {
        let members = members.clone();
        let url = url.clone();
        reads.spawn(async move {
            let status = tokio::time::timeout(deadline, async {
                let mut client = members.client(i).await?;
                client.status().await
            })
            .await;
            let version = match status {
                Ok(Ok(status)) => Some(status.version().to_owned()),
                _ => None,
            };
            (
                i,
                MemberVersion {
                    member: url,
                    version,
                },
            )
        });
    }
    let mut read = reads.join_all().await;
    read.sort_by_key(|(i, _)| *i);
    read.into_iter().map(|(_, v)| v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimum_is_the_first_release_of_each_line_with_the_fixes() {
        for (version, fixed) in [
            ("3.3.27", false),
            ("3.4.23", false),
            ("3.4.41", false),
            ("3.4.42", true),
            ("3.5.27", false),
            ("3.5.28", true),
            ("3.5.36", true),
            ("3.6.8", false),
            ("3.6.9", true),
            ("3.6.17", true),
            ("3.7.0", true),
            ("3.7.0-rc.0", true),
            ("4.0.0", true),
            ("", false),
            ("3.6", false),
            ("not a version", false),
        ] {
            assert_eq!(has_fixes(version), fixed, "{version}");
        }
    }

    #[test]
    fn the_warning_names_every_member_below_and_only_those() {
        let member = |member: &str, version: Option<&str>| MemberVersion {
            member: member.into(),
            version: version.map(str::to_owned),
        };
        assert_eq!(
            warning(&[member("a", Some("3.6.17")), member("b", None)]),
            None
        );
        let text = warning(&[
            member("a", Some("3.4.23")),
            member("b", Some("3.6.17")),
            member("c", Some("3.5.1")),
        ])
        .expect("a warning");
        assert!(
            text.starts_with("a runs etcd 3.4.23, c runs etcd 3.5.1: "),
            "{text}"
        );
        assert!(!text.contains("b runs"), "{text}");
    }
}
