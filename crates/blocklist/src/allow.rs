//! `allow add`, `allow remove` and `allow list`: the allowlist, ids that may never be
//! blocked (`/allowlist/{kind}/{id}`).

use blocklistd::model::Kind;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::cli::{AllowAddArgs, DryRunArg};
use crate::client::{check_id, segment, Client, Failure};
use crate::output::{emit, now, print_json};
use crate::render::{self, AllowPutView, AllowlistView, EntryView, ItemView};

/// The path of one entry: `/allowlist/nodes/a%2Fb`.
pub fn entry_path(kind: Kind, id: &str) -> String {
    format!("/allowlist/{}/{}", kind.plural(), segment(id))
}

pub async fn add(client: &Client, args: AllowAddArgs, json: bool) -> Result<(), Failure> {
    let kind = Kind::from(args.kind);
    check_id(crate::output::noun(kind), &args.id)?;
    let mut body = json!({"comment": args.comment});
    if args.prefix {
        body["prefix"] = json!(true);
    }
    if let Some(timeout) = args.timeout {
        body["timeout"] = json!(timeout);
    }
    if let Some(end) = args.until {
        body["endTimestamp"] = json!(end);
    }
    let path = args.dry_run.path(&entry_path(kind, &args.id));
    let reply = client.send(Method::PUT, &path, Some(&body)).await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let answer: AllowPutView = reply.json()?;
    let now = now();
    let replaced = if reply.status == StatusCode::OK {
        args.dry_run.verb(
            " (its earlier entry replaced)",
            " (its earlier entry would be replaced)",
        )
    } else {
        ""
    };
    let mut text = format!(
        "{} {}{replaced}: {}, comment \"{}\"\n",
        args.dry_run.verb("allowlisted", "would allowlist"),
        render::entry_subject(&answer.entry),
        render::entry_end(&answer.entry, now, &chrono::Local),
        render::clean(&answer.entry.comment),
    );
    if !answer.unblocked.is_empty() {
        text.push_str(args.dry_run.verb("unblocked:\n", "would unblock:\n"));
        let rows: Vec<(&str, &ItemView)> = answer
            .unblocked
            .iter()
            .map(|item| (item.kind.as_deref().unwrap_or(kind.singular()), item))
            .collect();
        text.push_str(&render::items_table(&rows, now, &chrono::Local));
    }
    emit(&text);
    Ok(())
}

pub async fn remove(
    client: &Client,
    kind: Kind,
    id: &str,
    dry_run: DryRunArg,
    json: bool,
) -> Result<(), Failure> {
    check_id(crate::output::noun(kind), id)?;
    let path = dry_run.path(&entry_path(kind, id));
    let reply = client.send(Method::DELETE, &path, None).await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let entry: EntryView = reply.json()?;
    emit(&format!(
        "{} the allowlist entry of {}\n",
        dry_run.verb("removed", "would remove"),
        render::entry_subject(&entry)
    ));
    Ok(())
}

pub async fn list(client: &Client, kind: Option<Kind>, json: bool) -> Result<(), Failure> {
    let path = match kind {
        None => "/allowlist".to_owned(),
        Some(kind) => format!("/allowlist/{}", kind.plural()),
    };
    let reply = client.send(Method::GET, &path, None).await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let entries: Vec<EntryView> = match kind {
        None => reply.json::<AllowlistView>()?.entries,
        Some(_) => reply.json()?,
    };
    if entries.is_empty() {
        emit(match kind {
            None => "the allowlist is empty\n",
            Some(Kind::TaskManager) => "no task manager is allowlisted\n",
            Some(Kind::Node) => "no node is allowlisted\n",
        });
    } else {
        emit(&render::allow_table(&entries, now(), &chrono::Local));
    }
    Ok(())
}
