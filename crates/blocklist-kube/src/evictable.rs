//! Which pods of an evacuated node are its work, to evict, as a pure function of the pod
//! read: never a DaemonSet's pod (it would come straight back, and it is the node's own
//! plumbing), never a mirror pod (the kubelet runs it from a file; the API cannot evict
//! it), never a pod that tolerates the bridge's taint (it was put there on purpose), and
//! not a pod that has finished (it holds no work). A pod already being deleted is still
//! work on the node — it counts as left until it is gone — but it is not evicted again.

use k8s_openapi::api::core::v1::{Pod, Toleration};

/// Why a pod on an evacuated node stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stays {
    DaemonSet,
    Mirror,
    Tolerates,
    Finished,
}

/// The annotation the kubelet puts on the API's copy of a static pod.
const MIRROR: &str = "kubernetes.io/config.mirror";

/// Whether `pod`, on a node tainted `key=value:NoSchedule`, is work to evict.
pub fn evictable(pod: &Pod, key: &str, value: &str) -> Result<(), Stays> {
    let owned_by_daemon_set = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.kind == "DaemonSet");
    if owned_by_daemon_set {
        return Err(Stays::DaemonSet);
    }
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR))
    {
        return Err(Stays::Mirror);
    }
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
    if tolerations
        .into_iter()
        .flatten()
        .any(|t| tolerates(t, key, value))
    {
        return Err(Stays::Tolerates);
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Err(Stays::Finished);
    }
    Ok(())
}

/// Whether the pod is being deleted already (evicted, by us or anyone).
pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Kubernetes' rule (`v1.Toleration.ToleratesTaint`) for the taint `key=value:NoSchedule`:
/// the effects match (an empty one matches all), and the keys (an empty key with `Exists`
/// matches all) and, for `Equal`, the values.
fn tolerates(t: &Toleration, key: &str, value: &str) -> bool {
    let effect = t.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != "NoSchedule" {
        return false;
    }
    let t_key = t.key.as_deref().unwrap_or_default();
    if !t_key.is_empty() && t_key != key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => !t_key.is_empty() && t.value.as_deref().unwrap_or_default() == value,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    const KEY: &str = "blocklistd.io/blocked";
    const VALUE: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";

    fn pod() -> Pod {
        Pod {
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn toleration(
        key: Option<&str>,
        operator: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: Some(operator.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn a_running_pod_is_work() {
        assert_eq!(evictable(&pod(), KEY, VALUE), Ok(()));
    }

    #[test]
    fn a_daemon_sets_pod_stays_but_one_it_merely_refers_to_does_not() {
        let mut p = pod();
        let owner = |controller| OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: "agent".into(),
            uid: "u".into(),
            controller,
            block_owner_deletion: None,
        };
        p.metadata.owner_references = Some(vec![owner(Some(true))]);
        assert_eq!(evictable(&p, KEY, VALUE), Err(Stays::DaemonSet));
        p.metadata.owner_references = Some(vec![owner(None)]);
        assert_eq!(evictable(&p, KEY, VALUE), Ok(()));
    }

    #[test]
    fn a_mirror_pod_stays() {
        let mut p = pod();
        p.metadata.annotations = Some(BTreeMap::from([(MIRROR.to_owned(), "x".to_owned())]));
        assert_eq!(evictable(&p, KEY, VALUE), Err(Stays::Mirror));
    }

    #[test]
    fn a_pod_tolerating_the_taint_stays_one_tolerating_another_does_not() {
        let cases = [
            (toleration(Some(KEY), "Exists", None, None), true),
            (
                toleration(Some(KEY), "Exists", None, Some("NoSchedule")),
                true,
            ),
            (toleration(Some(KEY), "Equal", Some(VALUE), None), true),
            (toleration(None, "Exists", None, None), true),
            (
                toleration(Some(KEY), "Equal", Some("MARK_BLOCKED"), None),
                false,
            ),
            (
                toleration(Some(KEY), "Exists", None, Some("NoExecute")),
                false,
            ),
            (
                toleration(Some("example.com/other"), "Exists", None, None),
                false,
            ),
        ];
        for (t, stays) in cases {
            let mut p = pod();
            p.spec.as_mut().unwrap().tolerations = Some(vec![t.clone()]);
            let expected = if stays { Err(Stays::Tolerates) } else { Ok(()) };
            assert_eq!(evictable(&p, KEY, VALUE), expected, "{t:?}");
        }
    }

    #[test]
    fn a_finished_pod_stays() {
        for phase in ["Succeeded", "Failed"] {
            let mut p = pod();
            p.status.as_mut().unwrap().phase = Some(phase.into());
            assert_eq!(evictable(&p, KEY, VALUE), Err(Stays::Finished));
        }
    }
}
