//! `policy status`, `policy show` and `policy set`. A set is a read, a change of the
//! fields given and a write of the whole policy: `PUT /policy` replaces every field, so
//! the ones without a flag go back as they were read.
//!
//! The change is made on the daemon's JSON rather than on a typed copy, so fields this
//! client does not know go back unchanged too.

use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::cli::{PermanentArg, PolicyFields, PolicySetArgs, Setting};
use crate::client::{Client, Failure};
use crate::output::{emit, print_json};
use crate::render;

pub async fn status(client: &Client, json: bool) -> Result<(), Failure> {
    let reply = client.send(Method::GET, "/policy/status", None).await?;
    if json {
        print_json(&reply);
    } else {
        emit(&render::policy_status_text(&reply.json()?));
    }
    Ok(())
}

pub async fn show(client: &Client, json: bool) -> Result<(), Failure> {
    let reply = client.send(Method::GET, "/policy", None).await?;
    if json {
        print_json(&reply);
    } else {
        emit(&render::policy_table(&reply.json()?));
    }
    Ok(())
}

pub async fn set(client: &Client, args: PolicySetArgs, json: bool) -> Result<(), Failure> {
    let fields = args.fields.given().map_err(Failure::refused)?;
    let before: Value = client.send(Method::GET, "/policy", None).await?.json()?;
    let mut policy = before.clone();
    edit(&mut policy, &fields).map_err(Failure::refused)?;
    let path = args.dry_run.path("/policy");
    let reply = client.send(Method::PUT, &path, Some(&policy)).await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let after: Value = reply.json()?;
    let heading = if after == before {
        "the policy is unchanged:\n"
    } else {
        args.dry_run
            .verb("the policy is now:\n", "the policy would be:\n")
    };
    let view = serde_json::from_value(after).map_err(|e| {
        Failure::refused(format!(
            "the server's policy is not what blocklistd sends: {e}"
        ))
    })?;
    emit(&format!("{heading}{}", render::policy_table(&view)));
    Ok(())
}

/// The flags of one kind, with the names of its JSON object and of its flags.
struct KindFields {
    key: &'static str,
    flag: &'static str,
    max_blocked_percent: Option<Setting<u8>>,
    max_evacuating_percent: Option<Setting<u8>>,
    max_blocked: Option<Setting<u64>>,
    per_minute: Option<Setting<u32>>,
    burst: Option<u32>,
}

/// Changes the fields of `policy` (the daemon's `GET /policy` document) that `fields`
/// gives; the rest stay as they are. Out-of-range values are left for the daemon to
/// refuse, so its rules stay the only ones; what is refused here is what has no meaning:
/// a burst without a rate.
pub fn edit(policy: &mut Value, fields: &PolicyFields) -> Result<(), String> {
    let kinds = [
        KindFields {
            key: "nodes",
            flag: "nodes",
            max_blocked_percent: fields.nodes_max_blocked_percent,
            max_evacuating_percent: fields.nodes_max_evacuating_percent,
            max_blocked: fields.nodes_max_blocked,
            per_minute: fields.nodes_evacuations_per_minute,
            burst: fields.nodes_evacuation_burst,
        },
        KindFields {
            key: "taskManagers",
            flag: "taskmanagers",
            max_blocked_percent: fields.taskmanagers_max_blocked_percent,
            max_evacuating_percent: fields.taskmanagers_max_evacuating_percent,
            max_blocked: fields.taskmanagers_max_blocked,
            per_minute: fields.taskmanagers_evacuations_per_minute,
            burst: fields.taskmanagers_evacuation_burst,
        },
    ];
    for kind in kinds {
        let of = object(policy, kind.key)?;
        if let Some(v) = kind.max_blocked_percent {
            of.insert("maxBlockedPercent".into(), setting(v));
        }
        if let Some(v) = kind.max_evacuating_percent {
            of.insert("maxEvacuatingPercent".into(), setting(v));
        }
        if let Some(v) = kind.max_blocked {
            of.insert("maxBlocked".into(), setting(v));
        }
        let rate = of.entry("evacuations").or_insert(Value::Null);
        match (kind.per_minute, kind.burst) {
            (None, None) => {}
            (Some(Setting::Off), Some(_)) => {
                return Err(format!(
                    "--{0}-evacuation-burst with --{0}-evacuations-per-minute off: a burst \
                     needs a rate",
                    kind.flag
                ))
            }
            (Some(Setting::Off), None) => *rate = Value::Null,
            (Some(Setting::Set(per_minute)), burst) => match rate.as_object_mut() {
                Some(rate) => {
                    rate.insert("perMinute".into(), json!(per_minute));
                    if let Some(burst) = burst {
                        rate.insert("burst".into(), json!(burst));
                    }
                }
                // A new rate starts with a minute's worth, as the daemon's flags do.
                None => {
                    let burst = burst.unwrap_or(per_minute);
                    *rate = json!({"perMinute": per_minute, "burst": burst});
                }
            },
            (None, Some(burst)) => match rate.as_object_mut() {
                Some(rate) => {
                    rate.insert("burst".into(), json!(burst));
                }
                None => {
                    return Err(format!(
                        "--{0}-evacuation-burst: {0} evacuations have no rate; give \
                         --{0}-evacuations-per-minute too",
                        kind.flag
                    ))
                }
            },
        }
    }
    let top = policy
        .as_object_mut()
        .ok_or("the server's policy is not a JSON object")?;
    if let Some(v) = fields.min_registered {
        top.insert("minRegistered".into(), json!(v));
    }
    if let Some(v) = fields.max_block_duration {
        top.insert("maxBlockDurationSecs".into(), setting(v));
    }
    if let Some(v) = fields.permanent_blocks {
        top.insert(
            "permanentBlocksAllowed".into(),
            json!(v == PermanentArg::Allowed),
        );
    }
    Ok(())
}

fn setting<T: Into<Value>>(setting: Setting<T>) -> Value {
    match setting {
        Setting::Off => Value::Null,
        Setting::Set(v) => v.into(),
    }
}

fn object<'a>(policy: &'a mut Value, key: &str) -> Result<&'a mut Map<String, Value>, String> {
    policy
        .get_mut(key)
        .and_then(Value::as_object_mut)
        .ok_or_else(|| format!("the server's policy has no {key:?} object"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Value {
        json!({
            "nodes": {"maxBlockedPercent": 50, "maxEvacuatingPercent": 20, "maxBlocked": null,
                      "evacuations": null},
            "taskManagers": {"maxBlockedPercent": 50, "maxEvacuatingPercent": null,
                             "maxBlocked": null, "evacuations": {"perMinute": 60, "burst": 30}},
            "minRegistered": 10,
            "maxBlockDurationSecs": null,
            "permanentBlocksAllowed": true,
            "someFutureField": {"kept": true}
        })
    }

    fn edited(fields: &PolicyFields) -> Result<Value, String> {
        let mut policy = defaults();
        edit(&mut policy, fields).map(|()| policy)
    }

    #[test]
    fn only_the_fields_given_change() {
        let policy = edited(&PolicyFields {
            nodes_max_blocked_percent: Some(Setting::Off),
            nodes_max_blocked: Some(Setting::Set(5)),
            taskmanagers_max_evacuating_percent: Some(Setting::Set(10)),
            min_registered: Some(3),
            max_block_duration: Some(Setting::Set(86_400)),
            permanent_blocks: Some(PermanentArg::Forbidden),
            ..PolicyFields::default()
        })
        .unwrap();
        let mut expected = defaults();
        expected["nodes"]["maxBlockedPercent"] = Value::Null;
        expected["nodes"]["maxBlocked"] = json!(5);
        expected["taskManagers"]["maxEvacuatingPercent"] = json!(10);
        expected["minRegistered"] = json!(3);
        expected["maxBlockDurationSecs"] = json!(86_400);
        expected["permanentBlocksAllowed"] = json!(false);
        assert_eq!(policy, expected);

        let policy = edited(&PolicyFields {
            max_block_duration: Some(Setting::Off),
            permanent_blocks: Some(PermanentArg::Allowed),
            ..PolicyFields::default()
        })
        .unwrap();
        assert_eq!(policy, defaults());
    }

    #[test]
    fn rates_and_bursts() {
        // A new rate: a minute's worth of burst, unless one is given.
        let policy = edited(&PolicyFields {
            nodes_evacuations_per_minute: Some(Setting::Set(6)),
            ..PolicyFields::default()
        })
        .unwrap();
        assert_eq!(
            policy["nodes"]["evacuations"],
            json!({"perMinute": 6, "burst": 6})
        );
        let policy = edited(&PolicyFields {
            nodes_evacuations_per_minute: Some(Setting::Set(6)),
            nodes_evacuation_burst: Some(2),
            ..PolicyFields::default()
        })
        .unwrap();
        assert_eq!(
            policy["nodes"]["evacuations"],
            json!({"perMinute": 6, "burst": 2})
        );
        // A changed rate keeps its burst; a burst alone changes only the burst.
        let policy = edited(&PolicyFields {
            taskmanagers_evacuations_per_minute: Some(Setting::Set(6)),
            ..PolicyFields::default()
        })
        .unwrap();
        assert_eq!(
            policy["taskManagers"]["evacuations"],
            json!({"perMinute": 6, "burst": 30})
        );
        let policy = edited(&PolicyFields {
            taskmanagers_evacuation_burst: Some(100),
            ..PolicyFields::default()
        })
        .unwrap();
        assert_eq!(
            policy["taskManagers"]["evacuations"],
            json!({"perMinute": 60, "burst": 100})
        );
        let policy = edited(&PolicyFields {
            taskmanagers_evacuations_per_minute: Some(Setting::Off),
            ..PolicyFields::default()
        })
        .unwrap();
        assert_eq!(policy["taskManagers"]["evacuations"], Value::Null);
        // A burst without a rate means nothing.
        let err = edited(&PolicyFields {
            nodes_evacuation_burst: Some(3),
            ..PolicyFields::default()
        })
        .unwrap_err();
        assert!(err.contains("--nodes-evacuations-per-minute"), "{err}");
        let err = edited(&PolicyFields {
            taskmanagers_evacuations_per_minute: Some(Setting::Off),
            taskmanagers_evacuation_burst: Some(3),
            ..PolicyFields::default()
        })
        .unwrap_err();
        assert!(err.contains("a burst needs a rate"), "{err}");
    }

    #[test]
    fn a_policy_that_is_not_blocklistds_is_refused() {
        let fields = PolicyFields {
            min_registered: Some(1),
            ..PolicyFields::default()
        };
        for mut policy in [
            json!([]),
            json!({"nodes": {}}),
            json!({"nodes": 1, "taskManagers": {}}),
        ] {
            assert!(edit(&mut policy, &fields).is_err(), "{policy}");
        }
    }
}
