//! `remove`: unblock one item by its id (`DELETE /blocklist/{kind}/{id}`, with a hold-off
//! if asked), or every item of a kind a selector picks (`DELETE /blocklist/{kind}?source=…`).

use std::fmt::Write as _;

use blocklistd::model::Kind;
use reqwest::Method;
use serde::Deserialize;

use crate::cli::RemoveArgs;
use crate::client::{check_id, item_path, segment, Client, Failure};
use crate::output::{emit, noun, now, print_json};
use crate::render::{self, ItemView};

/// The answer to an unblock by selector.
#[derive(Debug, Deserialize)]
struct SelectedView {
    count: usize,
    removed: Vec<ItemView>,
}

/// `path` with `name=value` appended to its query (the value percent-encoded).
fn with_query(path: &mut String, name: &str, value: &str) {
    path.push(if path.contains('?') { '&' } else { '?' });
    let _ = write!(path, "{name}={}", segment(value));
}

pub async fn remove(client: &Client, args: RemoveArgs, json: bool) -> Result<(), Failure> {
    let kind = Kind::from(args.kind);
    let Some(id) = &args.id else {
        return remove_selected(client, kind, &args, json).await;
    };
    check_id(noun(kind), id)?;
    let mut path = item_path(kind, id);
    if let Some(hold_off) = &args.hold_off {
        with_query(&mut path, "holdOff", hold_off);
    }
    if let Some(reason) = &args.reason {
        with_query(&mut path, "reason", reason);
    }
    let headers: Vec<_> = args.source.header().into_iter().collect();
    let reply = client
        .send_with(Method::DELETE, &args.dry_run.path(&path), None, &headers)
        .await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let mut text = format!(
        "{} {} {}",
        args.dry_run.verb("unblocked", "would unblock"),
        noun(kind),
        render::clean(id)
    );
    if args.hold_off.is_some() {
        let answer: render::RemovalView = reply.json()?;
        // The daemon keeps an entry of the id that lasts longer than the hold-off; either
        // way, the entry it names is what holds the id off.
        match answer.hold_off {
            Some(entry) => {
                let _ = write!(
                    text,
                    ", held off {}",
                    render::entry_end(&entry, now(), &chrono::Local)
                );
            }
            None => text.push_str(", without a hold-off (the daemon put none)"),
        }
    }
    text.push('\n');
    emit(&text);
    Ok(())
}

/// The selector `DELETE` of a kind: every item that matches, in one transaction, listed.
async fn remove_selected(
    client: &Client,
    kind: Kind,
    args: &RemoveArgs,
    json: bool,
) -> Result<(), Failure> {
    let selector = &args.selector;
    let mut path = format!("/blocklist/{}", kind.plural());
    if let Some(source) = &selector.by_source {
        with_query(&mut path, "source", source);
    }
    if let Some(cause) = &selector.by_cause {
        with_query(&mut path, "cause", cause);
    }
    if selector.all {
        with_query(&mut path, "all", "true");
    }
    if let Some(reason) = &args.reason {
        with_query(&mut path, "reason", reason);
    }
    let headers: Vec<_> = args.source.header().into_iter().collect();
    let reply = client
        .send_with(Method::DELETE, &args.dry_run.path(&path), None, &headers)
        .await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let answer: SelectedView = reply.json()?;
    let plural = match kind {
        Kind::TaskManager => "task managers",
        Kind::Node => "nodes",
    };
    if answer.count == 0 {
        emit(&format!(
            "no {} matched; nothing was unblocked\n",
            noun(kind)
        ));
        return Ok(());
    }
    let what = if answer.count == 1 {
        noun(kind)
    } else {
        plural
    };
    let mut text = format!(
        "{} {} {what}:\n",
        args.dry_run.verb("unblocked", "would unblock"),
        answer.count
    );
    let rows: Vec<(&str, &ItemView)> = answer
        .removed
        .iter()
        .map(|item| (kind.singular(), item))
        .collect();
    text.push_str(&render::items_table(&rows, now(), &chrono::Local));
    emit(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_query;

    #[test]
    fn query_values_are_encoded() {
        let mut path = "/blocklist/nodes".to_owned();
        with_query(&mut path, "cause", "disk full & more");
        with_query(&mut path, "all", "true");
        assert_eq!(
            path,
            "/blocklist/nodes?cause=disk%20full%20%26%20more&all=true"
        );
    }
}
