//! One `--condition`: a Node condition type that blocks its Node once it has held one of
//! its sick statuses for a while. Written `TYPE[,status=S|S…][,hold=D][,action=A]
//! [,duration=D|permanent]`, e.g. `KernelDeadlock`, `ReadonlyFilesystem,action=evacuate`,
//! `Ready,status=False|Unknown,hold=5m,duration=1h`.

use std::str::FromStr;
use std::time::Duration;

/// The action that asks for the running work to leave too.
const EVACUATE: &str = "MARK_BLOCKED_AND_EVACUATE_TASKS";
const BLOCK: &str = "MARK_BLOCKED";

/// How long a condition holds before it counts, unless said: a blip does not block.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The condition's `type` (`KernelDeadlock`, `DiskPressure`).
    pub kind: String,
    /// The statuses that mean sick (`True` unless said).
    pub sick: Vec<String>,
    /// How long from its `lastTransitionTime` it must hold before it counts.
    pub hold: Duration,
    pub action: &'static str,
    /// How long the block lasts from the moment the condition counted; `None`: until it
    /// clears (the report is then retracted).
    pub duration: Option<Duration>,
}

impl FromStr for Spec {
    type Err = String;

    fn from_str(text: &str) -> Result<Spec, String> {
        let mut parts = text.split(',').map(str::trim);
        let kind = parts.next().unwrap_or_default();
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/');
        if kind.is_empty() || kind.len() > 63 || !kind.chars().all(valid) {
            return Err(format!(
                "{text:?}: the condition's type comes first, 1 to 63 letters, digits, '.', '-', '_' or '/'"
            ));
        }
        let mut spec = Spec {
            kind: kind.to_owned(),
            sick: vec!["True".to_owned()],
            hold: DEFAULT_HOLD,
            action: BLOCK,
            duration: None,
        };
        for part in parts {
            let Some((key, value)) = part.split_once('=') else {
                return Err(format!("{text:?}: {part:?} is not KEY=VALUE"));
            };
            match key {
                "status" => {
                    spec.sick = value.split('|').map(str::to_owned).collect();
                    if let Some(bad) = spec
                        .sick
                        .iter()
                        .find(|s| !matches!(s.as_str(), "True" | "False" | "Unknown"))
                    {
                        return Err(format!(
                            "{text:?}: status {bad:?} is none of True, False, Unknown"
                        ));
                    }
                }
                "hold" => {
                    spec.hold = humantime::parse_duration(value)
                        .map_err(|e| format!("{text:?}: hold {value:?}: {e}"))?;
                }
                "action" => {
                    spec.action = match value {
                        "MARK_BLOCKED" | "block" => BLOCK,
                        "MARK_BLOCKED_AND_EVACUATE_TASKS" | "evacuate" => EVACUATE,
                        _ => {
                            return Err(format!(
                                "{text:?}: action {value:?} is none of MARK_BLOCKED (block), \
                                 MARK_BLOCKED_AND_EVACUATE_TASKS (evacuate)"
                            ))
                        }
                    };
                }
                "duration" if value == "permanent" => spec.duration = None,
                "duration" => {
                    let duration = humantime::parse_duration(value)
                        .map_err(|e| format!("{text:?}: duration {value:?}: {e}"))?;
                    if duration.is_zero() {
                        return Err(format!("{text:?}: a duration of 0 blocks nothing"));
                    }
                    spec.duration = Some(duration);
                }
                _ => {
                    return Err(format!(
                        "{text:?}: {key:?} is none of status, hold, action, duration"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

/// Checks that no two specs name the same type.
pub fn distinct(specs: &[Spec]) -> Result<(), String> {
    for (i, spec) in specs.iter().enumerate() {
        if specs[..i].iter().any(|s| s.kind == spec.kind) {
            return Err(format!("--condition {}: given twice", spec.kind));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_alone_takes_the_defaults() {
        let spec: Spec = "KernelDeadlock".parse().unwrap();
        assert_eq!(
            spec,
            Spec {
                kind: "KernelDeadlock".into(),
                sick: vec!["True".into()],
                hold: DEFAULT_HOLD,
                action: BLOCK,
                duration: None,
            }
        );
    }

    #[test]
    fn every_key_is_read() {
        let spec: Spec = "Ready, status=False|Unknown, hold=5m, action=evacuate, duration=1h"
            .parse()
            .unwrap();
        assert_eq!(spec.sick, ["False", "Unknown"]);
        assert_eq!(spec.hold, Duration::from_secs(300));
        assert_eq!(spec.action, EVACUATE);
        assert_eq!(spec.duration, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (text, says) in [
            ("", "type comes first"),
            ("Disk Pressure", "type comes first"),
            ("X,hold", "not KEY=VALUE"),
            ("X,status=Maybe", "\"Maybe\" is none of"),
            ("X,hold=soon", "hold \"soon\""),
            ("X,action=drain", "action \"drain\""),
            ("X,duration=0s", "blocks nothing"),
            ("X,color=red", "\"color\" is none of"),
        ] {
            let error = text.parse::<Spec>().unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
        let twice = ["A".parse().unwrap(), "A,hold=1s".parse().unwrap()];
        assert!(distinct(&twice).unwrap_err().contains("given twice"));
    }
}
