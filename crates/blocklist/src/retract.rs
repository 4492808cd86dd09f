//! `retract`: take back one source's live report of items (`POST /blocklist/retract/{kind}`).
//! Each item's block is then what the other sources' reports ask for, or ends when none is
//! left; retracting what is not there changes nothing.

use std::fmt::Write as _;

use blocklistd::model::Kind;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::cli::RetractArgs;
use crate::client::{check_id, segment, Client, Failure};
use crate::output::{emit, noun, print_json};
use crate::render::{self, ItemView};

/// One retraction's result.
#[derive(Debug, Deserialize)]
struct ResultView {
    id: String,
    source: String,
    outcome: String,
    item: Option<ItemView>,
}

#[derive(Debug, Deserialize)]
struct AnswerView {
    retracted: Vec<ResultView>,
}

pub async fn retract(client: &Client, args: RetractArgs, json: bool) -> Result<(), Failure> {
    let kind = Kind::from(args.kind);
    for id in &args.ids {
        check_id(noun(kind), id)?;
    }
    let elements: Vec<Value> = args
        .ids
        .iter()
        .map(|id| match &args.source {
            Some(source) => json!({"id": id, "source": source}),
            None => json!({"id": id}),
        })
        .collect();
    let mut path = format!("/blocklist/retract/{}", kind.plural());
    if let Some(reason) = &args.reason {
        let _ = write!(path, "?reason={}", segment(reason));
    }
    let reply = client
        .send(
            Method::POST,
            &args.dry_run.path(&path),
            Some(&json!(elements)),
        )
        .await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let answer: AnswerView = reply.json()?;
    let mut text = String::new();
    for r in &answer.retracted {
        let (id, source) = (render::clean(&r.id), render::clean(&r.source));
        let said = match (r.outcome.as_str(), &r.item) {
            ("kept", Some(item)) => format!(
                "{} {source}'s report of {} {id}; still blocked ({}), held by {}",
                args.dry_run.verb("retracted", "would retract"),
                noun(kind),
                render::action_name(&item.action),
                render::clean(&item.holders().join(", ")),
            ),
            ("ended", _) => format!(
                "{} {source}'s report of {} {id}, the last: {} {id} {}",
                args.dry_run.verb("retracted", "would retract"),
                noun(kind),
                noun(kind),
                args.dry_run.verb("is unblocked", "would be unblocked"),
            ),
            _ => format!(
                "{source} holds no report of {} {id}: nothing to retract",
                noun(kind)
            ),
        };
        let _ = writeln!(text, "{said}");
    }
    emit(&text);
    Ok(())
}
