//! `update`: one blocked item changed in place (`PATCH /blocklist/{kind}/{id}`), optionally
//! only if it is still in the state its `ETag` names.

use blocklistd::model::{Action, Kind};
use reqwest::Method;
use serde_json::{json, Value};

use crate::cli::UpdateArgs;
use crate::client::{check_id, item_path, Client, Failure};
use crate::output::{emit, noun, now, print_json};
use crate::render::{self, ItemView};

/// The body of the `PATCH`: only what the flags change.
fn body(args: &UpdateArgs) -> Value {
    let mut body = json!({});
    if let Some(timeout) = args.timeout {
        body["timeout"] = json!(timeout);
    }
    if let Some(end) = args.end {
        body["endTimestamp"] = json!(end);
    }
    if args.permanent {
        body["permanent"] = json!(true);
    }
    if let Some(action) = args.action {
        body["action"] = json!(Action::from(action).as_str());
    }
    if let Some(cause) = &args.cause {
        body["cause"] = json!(cause);
    }
    body
}

pub async fn update(client: &Client, args: UpdateArgs, json: bool) -> Result<(), Failure> {
    let kind = Kind::from(args.kind);
    check_id(noun(kind), &args.id)?;
    let mut path = item_path(kind, &args.id);
    if args.force {
        path.push_str("?force=true");
    }
    let path = args.dry_run.path(&path);
    let if_match = args.if_match_header();
    let headers: Vec<(&'static str, &str)> = args
        .source
        .header()
        .into_iter()
        .chain(if_match.as_deref().map(|tag| ("if-match", tag)))
        .collect();
    let reply = client
        .send_with(Method::PATCH, &path, Some(&body(&args)), &headers)
        .await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let item: ItemView = reply.json()?;
    let mut text = format!(
        "{} {} {}, ETag \"{}\":\n",
        args.dry_run.verb("updated", "would update"),
        noun(kind),
        render::clean(&args.id),
        item.revision
    );
    text.push_str(&render::items_table(
        &[(kind.singular(), &item)],
        now(),
        &chrono::Local,
    ));
    emit(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::parse;
    use crate::cli::{Api, Command};

    fn body_of(args: &[&str]) -> Value {
        let mut all = vec!["update", "node", "n1"];
        all.extend_from_slice(args);
        match parse(&all).unwrap().command {
            Command::Api(Api::Update(update)) => body(&update),
            other => panic!("not an update: {other:?}"),
        }
    }

    #[test]
    fn the_body_carries_only_what_changes() {
        assert_eq!(
            body_of(&["--timeout", "30m"]),
            json!({"timeout": 1_800_000})
        );
        assert_eq!(
            body_of(&["--permanent", "--action", "block", "--cause", "c"]),
            json!({"permanent": true, "action": "MARK_BLOCKED", "cause": "c"})
        );
        assert_eq!(
            body_of(&["--end", "2030-01-01T00:00:00Z", "--action", "evacuate"]),
            json!({"endTimestamp": 1_893_456_000_000_i64, "action": "MARK_BLOCKED_AND_EVACUATE_TASKS"})
        );
    }
}
