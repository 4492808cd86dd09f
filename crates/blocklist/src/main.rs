//! `blocklist`: the command-line client of blocklistd, over its REST API.
//!
//! # Layout
//! - [`cli`]: flags and subcommands, and the pure parsers of timeouts and end times.
//! - `client` (the crate's library, `src/lib.rs`, with `sse` and `status`): HTTP
//!   (reqwest), the bearer token, path encoding, and the mapping of outcomes onto exit
//!   codes (0 ok, 1 refused, 2 unreachable).
//! - [`render`]: human output — tables, local end times with "in 59m", check answers,
//!   feed event lines.
//! - [`policy`]: `policy status`, `show` and `set` (the read-change-write of the policy).
//! - [`allow`]: the allowlist's `allow add`, `remove` and `list`.
//! - [`provenance`]: `get` (an item with its reports and past blocks) and `history`.
//! - [`update`]: `update`, a change to one item in place.
//! - [`unblock`]: `remove`, of one id or of every item a selector picks.
//! - [`watch`]: the change feed: the reconnecting follow loop.
//! - [`output`]: stdout (a closed pipe ends quietly), `--json`'s pass-through, the kind's
//!   noun and the clock the human output uses.
//!
//! `completion` and `man` print what the daemon's library generates from [`cli`]'s
//! definitions (`blocklistd::shell`), without a request.
//!
//! This file runs one subcommand: it builds the request, sends it, and prints either the
//! server's JSON (`--json`) or the human rendering.

mod allow;
mod cli;
mod output;
mod policy;
mod provenance;
mod render;
mod retract;
mod unblock;
mod update;
mod watch;

use std::fmt::Write as _;
use std::process::ExitCode;

use blocklist::{client, status};
use blocklistd::model::{Action, Kind};
use clap::{CommandFactory, Parser};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::cli::{AddArgs, AllowCommand, Api, Cli, Command, DryRunArg, PolicyCommand};
use crate::client::{check_id, segment, Client, Failure, TlsFiles};
use crate::output::{emit, noun, now, print_json, print_value};
use crate::render::{ItemView, Listing};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap would exit 2 on a usage error, but 2 means "cannot reach the server"
            // here, which scripts may retry; a bad command line is a refusal (1).
            return ExitCode::from(u8::from(e.use_stderr()));
        }
    };
    let api = match cli.command {
        Command::Api(api) => api,
        Command::Completion { shell } => {
            return printed(blocklistd::shell::print_completion(&Cli::command(), shell))
        }
        Command::Man { dir } => {
            return printed(blocklistd::shell::print_man(
                &Cli::command(),
                dir.as_deref(),
            ))
        }
    };
    // One request at a time: a single-threaded runtime is all it takes.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("blocklist: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let tls = TlsFiles {
        cacert: cli.cacert.clone(),
        cert: cli.cert.clone(),
        key: cli.key.clone(),
    };
    match runtime.block_on(run(
        &cli.server,
        cli.token_file.as_deref(),
        &tls,
        cli.json,
        api,
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            for message in failure.messages() {
                eprintln!("blocklist: {message}");
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

/// The exit of `completion` and `man`: 0, or 1 with the error.
fn printed(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("blocklist: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(
    server: &str,
    token_file: Option<&std::path::Path>,
    tls: &TlsFiles,
    json: bool,
    api: Api,
) -> Result<(), Failure> {
    let streaming = matches!(api, Api::Watch { .. });
    let client = Client::new(server, token_file, tls, streaming)?;
    match api {
        Api::List { kind } => list(&client, kind.map(Kind::from), json).await,
        Api::Get { kind, id } => provenance::get(&client, kind.into(), &id, json).await,
        Api::History { kind, id } => provenance::history(&client, kind.into(), &id, json).await,
        Api::Add(args) => add(&client, args, json).await,
        Api::Update(args) => update::update(&client, args, json).await,
        Api::Remove(args) => unblock::remove(&client, args, json).await,
        Api::Retract(args) => retract::retract(&client, args, json).await,
        Api::Check(args) => {
            let (kind, id) = args.resolve().map_err(Failure::refused)?;
            check(&client, kind, &id, json).await
        }
        Api::Register {
            taskmanager,
            node,
            dry_run,
        } => register(&client, &taskmanager, &node, dry_run, json).await,
        Api::Unregister {
            taskmanager,
            dry_run,
        } => unregister(&client, &taskmanager, dry_run, json).await,
        Api::Policy { command } => match command {
            None | Some(PolicyCommand::Status) => policy::status(&client, json).await,
            Some(PolicyCommand::Show) => policy::show(&client, json).await,
            Some(PolicyCommand::Set(args)) => policy::set(&client, args, json).await,
        },
        Api::Allow(command) => match command {
            AllowCommand::Add(args) => allow::add(&client, args, json).await,
            AllowCommand::Remove { kind, id, dry_run } => {
                allow::remove(&client, kind.into(), &id, dry_run, json).await
            }
            AllowCommand::List { kind } => allow::list(&client, kind.map(Kind::from), json).await,
        },
        Api::Watch { since } => watch::run(&client, since, json).await,
    }
}

async fn list(client: &Client, kind: Option<Kind>, json: bool) -> Result<(), Failure> {
    let path = match kind {
        None => "/blocklist".to_owned(),
        Some(kind) => format!("/blocklist/{}", kind.plural()),
    };
    // In pages: a list of a million items is never one answer; the pages join into the
    // listing as one answer would have it, at the walk's revision.
    let pages = client.pages(&path).await?;
    let mut pages = pages.iter().map(client::Reply::json::<Value>);
    let mut joined = pages.next().unwrap_or(Ok(Value::Null))?;
    for page in pages {
        join_page(&mut joined, page?);
    }
    if json {
        print_value(&joined);
        return Ok(());
    }
    let parsed = |e: serde_json::Error| Failure::refused(format!("the server's listing: {e}"));
    let items: Vec<(&str, ItemView)> = match kind {
        None => {
            let listing: Listing = serde_json::from_value(joined).map_err(parsed)?;
            let tms = listing.blocked_task_managers.into_iter();
            let nodes = listing.blocked_nodes.into_iter();
            tms.map(|i| (Kind::TaskManager.singular(), i))
                .chain(nodes.map(|i| (Kind::Node.singular(), i)))
                .collect()
        }
        Some(kind) => {
            let items: Vec<ItemView> = serde_json::from_value(joined).map_err(parsed)?;
            items.into_iter().map(|i| (kind.singular(), i)).collect()
        }
    };
    if items.is_empty() {
        emit(match kind {
            None => "nothing is blocked\n",
            Some(Kind::TaskManager) => "no task manager is blocked\n",
            Some(Kind::Node) => "no node is blocked\n",
        });
        return Ok(());
    }
    let rows: Vec<(&str, &ItemView)> = items.iter().map(|(k, i)| (*k, i)).collect();
    let statuses = enforcement(client).await;
    emit(&render::items_table_with(
        &rows,
        &statuses,
        now(),
        &chrono::Local,
    ));
    Ok(())
}

/// Appends a page's entries to the listing joined so far: an array's elements, or each list
/// of `GET /blocklist`'s object (whose revision, the walk's, is the same on every page).
fn join_page(joined: &mut Value, page: Value) {
    match (joined, page) {
        (Value::Array(all), Value::Array(more)) => all.extend(more),
        (Value::Object(all), Value::Object(more)) => {
            for (field, value) in more {
                if let (Some(Value::Array(all)), Value::Array(more)) = (all.get_mut(&field), value)
                {
                    all.extend(more);
                }
            }
        }
        _ => {}
    }
}

/// What enforcers report about the blocked items (`GET /enforcement`), for `list`'s last
/// column; none when the daemon has no such listing (an older one) or it fails: the list
/// itself is what was asked for.
async fn enforcement(client: &Client) -> render::Enforcement {
    #[derive(serde::Deserialize)]
    struct Status {
        kind: String,
        id: String,
        enforcer: String,
        state: String,
    }
    let Ok(reply) = client.send(Method::GET, "/enforcement", None).await else {
        return render::Enforcement::new();
    };
    let mut out = render::Enforcement::new();
    for status in reply.json::<Vec<Status>>().unwrap_or_default() {
        let text = out.entry((status.kind, status.id)).or_default();
        if !text.is_empty() {
            text.push_str(", ");
        }
        let _ = write!(text, "{}: {}", status.enforcer, status.state);
    }
    out
}

async fn add(client: &Client, args: AddArgs, json: bool) -> Result<(), Failure> {
    let kind = Kind::from(args.kind);
    let action = Action::from(args.action);
    for id in &args.ids {
        check_id(noun(kind), id)?;
    }
    let elements: Vec<Value> = args
        .ids
        .iter()
        .map(|id| {
            let mut element = json!({"id": id, "action": action.as_str(), "cause": args.cause});
            if let Some(timeout) = args.timeout {
                element["timeout"] = json!(timeout);
            }
            if let Some(end) = args.until {
                element["endTimestamp"] = json!(end);
            }
            if args.merge {
                element["allowMerge"] = json!(true);
            }
            element
        })
        .collect();
    let mut path = format!("/blocklist/{}", kind.plural());
    if args.force {
        path.push_str("?force=true");
    }
    let path = args.dry_run.path(&path);
    let headers: Vec<_> = args.source.header().into_iter().collect();
    let reply = client
        .send_with(Method::POST, &path, Some(&Value::Array(elements)), &headers)
        .await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    // 202 lists the items that merged (once per id); the other ids were new.
    let merged: Vec<ItemView> = if reply.status == StatusCode::ACCEPTED {
        reply.json()?
    } else {
        Vec::new()
    };
    let now = now();
    // The daemon turns a timeout into an end time on arrival; this is the same within
    // the request's round trip.
    let end = match (args.timeout, args.until) {
        (Some(timeout), _) => now.saturating_add(timeout),
        (None, Some(until)) => until,
        (None, None) => blocklistd::model::PERMANENT,
    };
    let mut text = String::new();
    let mut seen = std::collections::HashSet::new();
    for id in &args.ids {
        if seen.insert(id) && !merged.iter().any(|m| &m.id == id) {
            let _ = writeln!(
                text,
                "{} {} {}: {}, ends {}",
                args.dry_run.verb("blocked", "would block"),
                noun(kind),
                render::clean(id),
                render::action_name(action.as_str()),
                render::end_time(end, now, &chrono::Local)
            );
        }
    }
    if !merged.is_empty() {
        text.push_str(args.dry_run.verb(
            "merged into existing blocks, which are now:\n",
            "would merge into existing blocks, which would be:\n",
        ));
        let rows: Vec<(&str, &ItemView)> = merged.iter().map(|i| (kind.singular(), i)).collect();
        text.push_str(&render::items_table(&rows, now, &chrono::Local));
    }
    emit(&text);
    Ok(())
}

async fn check(client: &Client, kind: Kind, id: &str, json: bool) -> Result<(), Failure> {
    check_id(noun(kind), id)?;
    let path = format!("/blocklist/check/{}/{}", kind.plural(), segment(id));
    let reply = client.send(Method::GET, &path, None).await?;
    if json {
        print_json(&reply);
        return Ok(());
    }
    let answer: render::CheckView = reply.json()?;
    emit(&render::check_text(
        kind.singular(),
        &answer,
        now(),
        &chrono::Local,
    ));
    Ok(())
}

async fn register(
    client: &Client,
    tm: &str,
    node: &str,
    dry_run: DryRunArg,
    json: bool,
) -> Result<(), Failure> {
    check_id("task manager", tm)?;
    check_id("node", node)?;
    let path = dry_run.path(&format!("/taskmanagers/{}", segment(tm)));
    let reply = client
        .send(Method::PUT, &path, Some(&json!({"node": node})))
        .await?;
    if json {
        print_json(&reply);
    } else if reply.status == StatusCode::CREATED {
        emit(&format!(
            "{} task manager {} on node {}\n",
            dry_run.verb("registered", "would register"),
            render::clean(tm),
            render::clean(node)
        ));
    } else {
        // 200 covers both "moved" and "unchanged"; the daemon does not say which.
        emit(&format!(
            "task manager {} {} on node {} (it was registered before)\n",
            render::clean(tm),
            dry_run.verb("is registered", "would be registered"),
            render::clean(node)
        ));
    }
    Ok(())
}

async fn unregister(
    client: &Client,
    tm: &str,
    dry_run: DryRunArg,
    json: bool,
) -> Result<(), Failure> {
    check_id("task manager", tm)?;
    let path = dry_run.path(&format!("/taskmanagers/{}", segment(tm)));
    let reply = client.send(Method::DELETE, &path, None).await?;
    if json {
        print_json(&reply);
    } else {
        emit(&format!(
            "{} task manager {}\n",
            dry_run.verb("unregistered", "would unregister"),
            render::clean(tm)
        ));
    }
    Ok(())
}
