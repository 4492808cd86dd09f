//! `get` and `history`: one item with who reported it, and the blocks its id had before
//! (`/blocklist/{kind}/{id}` and `…/history`).

use std::fmt::Write as _;

use blocklistd::model::Kind;
use reqwest::Method;

use crate::client::{check_id, item_path, Client, Failure};
use crate::output::{emit, noun, now, print_json};
use crate::render::{self, ItemDetailView, PastBlockView};

/// The path of an id's past blocks: `/blocklist/nodes/a%2Fb/history`.
fn history_path(kind: Kind, id: &str) -> String {
    format!("{}/history", item_path(kind, id))
}

/// The item, its provenance and reports, and its id's past blocks; with `--json`, the
/// server's item (with its reports) as it came.
pub async fn get(client: &Client, kind: Kind, id: &str, json: bool) -> Result<(), Failure> {
    check_id(noun(kind), id)?;
    let reply = client.send(Method::GET, &item_path(kind, id), None).await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let detail: ItemDetailView = reply.json()?;
    let past: Vec<PastBlockView> = client
        .send(Method::GET, &history_path(kind, id), None)
        .await?
        .json()?;
    let (now, tz) = (now(), &chrono::Local);
    let item = &detail.item;
    let mut text = render::items_table(&[(kind.singular(), item)], now, tz);
    text.push_str(&render::provenance_text(item, now, tz));
    if let Some(forced) = &item.forced {
        let _ = writeln!(text, "{}", render::forced_text(forced, tz));
    }
    if let Some(tms) = &item.task_managers {
        let id = render::clean(&item.id);
        if tms.is_empty() {
            let _ = writeln!(text, "no task manager is registered on node {id}");
        } else {
            let tms: Vec<String> = tms.iter().map(|tm| render::clean(tm)).collect();
            let _ = writeln!(text, "task managers on node {id}: {}", tms.join(", "));
        }
    }
    if !detail.enforcement.is_empty() {
        text.push_str("\nenforcement:\n");
        text.push_str(&render::enforcement_text(
            &detail.enforcement,
            item.revision,
            now,
            tz,
        ));
    }
    if !detail.live_reports.is_empty() {
        text.push_str("\nheld by:\n");
        text.push_str(&render::live_reports_table(&detail.live_reports, tz));
    }
    if !detail.reports.is_empty() {
        let shown = detail.reports.len() as u64;
        if shown < item.report_count {
            let _ = writeln!(
                text,
                "\nreports, the {shown} most recent of {}:",
                item.report_count
            );
        } else {
            text.push_str("\nreports:\n");
        }
        text.push_str(&render::reports_table(&detail.reports, tz));
    }
    if past.is_empty() {
        text.push_str("\nno past blocks\n");
    } else {
        text.push_str("\npast blocks:\n");
        text.push_str(&render::past_blocks_table(&past, tz));
    }
    emit(&text);
    Ok(())
}

/// The id's past blocks alone, newest first.
pub async fn history(client: &Client, kind: Kind, id: &str, json: bool) -> Result<(), Failure> {
    check_id(noun(kind), id)?;
    let reply = client
        .send(Method::GET, &history_path(kind, id), None)
        .await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let past: Vec<PastBlockView> = reply.json()?;
    if past.is_empty() {
        emit(&format!(
            "{} {} has no past blocks\n",
            noun(kind),
            render::clean(id)
        ));
    } else {
        emit(&render::past_blocks_table(&past, &chrono::Local));
    }
    Ok(())
}
