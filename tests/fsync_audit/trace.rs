//! strace output read back as system calls: one `Call` per call, halves joined.

use super::*;

// ---------------------------------------------------------------------------------------
// The trace

/// One system call, its `<unfinished ...>` and `<... resumed>` halves joined.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) tid: u32,
    /// Microseconds since the epoch, at entry and at exit (entry + the `-T` duration).
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) name: String,
    pub(crate) args: Vec<String>,
    /// What follows `= `: `0`, `5</path>`, `-1 ENOENT (No such file or directory)`, `?`.
    pub(crate) ret: String,
}

impl Call {
    /// The return value as a number (`None` for `?`).
    pub(crate) fn ret_num(&self) -> Option<i64> {
        let n: String = self
            .ret
            .chars()
            .enumerate()
            .take_while(|(i, c)| c.is_ascii_digit() || (*i == 0 && *c == '-'))
            .map(|(_, c)| c)
            .collect();
        n.parse().ok()
    }

    pub(crate) fn ok(&self) -> bool {
        self.ret_num().is_some_and(|n| n >= 0)
    }
}

/// Parses `strace -f -ttt -T -yy` output (`TID SECONDS.MICROS call(args) = ret <dur>`).
pub(crate) fn parse_trace(text: &str) -> Vec<Call> {
    let mut pending: HashMap<u32, (u64, String)> = HashMap::new();
    let mut calls = Vec::new();
    for line in text.lines() {
        let Some((tid, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(tid) = tid.parse::<u32>() else {
            continue;
        };
        let Some((ts, body)) = rest.trim_start().split_once(' ') else {
            continue;
        };
        let Some(ts) = parse_micros(ts) else { continue };
        let (start, full) = if let Some(resumed) = body.strip_prefix("<... ") {
            let Some((_, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            let Some((start, head)) = pending.remove(&tid) else {
                continue;
            };
            (start, format!("{head}{tail}"))
        } else {
            (ts, body.to_owned())
        };
        if let Some(head) = full.strip_suffix("<unfinished ...>") {
            pending.insert(tid, (start, head.trim_end().to_owned()));
            continue;
        }
        if let Some(call) = parse_call(tid, start, &full) {
            calls.push(call);
        }
    }
    calls.sort_by_key(|c| c.start);
    calls
}

/// `1712345678.123456` → microseconds.
pub(crate) fn parse_micros(ts: &str) -> Option<u64> {
    let (s, us) = ts.split_once('.')?;
    let us = format!("{us:0<6}");
    Some(s.parse::<u64>().ok()? * 1_000_000 + us.get(..6)?.parse::<u64>().ok()?)
}

pub(crate) fn parse_call(tid: u32, start: u64, text: &str) -> Option<Call> {
    let open = text.find('(')?;
    let name = &text[..open];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None; // `+++ exited …`, `--- SIGTERM …`
    }
    let (args, rest) = split_args(&text[open + 1..])?;
    let rest = rest.trim_start().strip_prefix('=')?.trim();
    // `-T` appends ` <0.000123>`; the value itself may end with `>` (`5</path>`).
    let (ret, dur) = match rest.rsplit_once(" <") {
        Some((ret, d)) if d.ends_with('>') && d[..d.len() - 1].parse::<f64>().is_ok() => {
            let secs: f64 = d[..d.len() - 1].parse().unwrap();
            (ret.trim(), (secs * 1e6).round() as u64)
        }
        _ => (rest, 0),
    };
    Some(Call {
        tid,
        start,
        end: start + dur,
        name: name.to_owned(),
        args,
        ret: ret.to_owned(),
    })
}

/// Splits `a, "b,c", [d, e], 5<TCP:[1.2.3.4:5->6.7.8.9:10]>) = …` (after the opening
/// parenthesis) into top-level arguments and what follows the closing parenthesis.
pub(crate) fn split_args(s: &str) -> Option<(Vec<String>, &str)> {
    let bytes = s.as_bytes();
    let mut args = Vec::new();
    let mut depth = 0usize;
    let mut from = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A decoration of `-y`: `5</path>`, `AT_FDCWD</cwd>`, `7<TCP:[a->b]>`; a `>`
            // inside its brackets does not end it.
            b'<' if i > 0 && (bytes[i - 1].is_ascii_digit() || bytes[i - 1] == b'D') => {
                let mut brackets = 0usize;
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'[' => brackets += 1,
                        b']' => brackets = brackets.saturating_sub(1),
                        b'>' if brackets == 0 => break,
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' if depth == 0 => {
                let last = s[from..i].trim();
                if !last.is_empty() || !args.is_empty() {
                    args.push(last.to_owned());
                }
                return Some((args, &s[i + 1..]));
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                args.push(s[from..i].trim().to_owned());
                from = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The path or socket of a decorated descriptor: `5</a/b>` → `/a/b`.
pub(crate) fn decoration(arg: &str) -> Option<&str> {
    let at = arg.find('<')?;
    arg.strip_suffix('>').map(|a| &a[at + 1..])
}

/// The text of a string argument (`"d/x"`), C escapes undone.
pub(crate) fn c_string(arg: &str) -> Option<String> {
    let inner = arg.strip_prefix('"')?;
    let mut out = Vec::new();
    let mut it = inner.bytes().peekable();
    while let Some(b) = it.next() {
        match b {
            b'"' => return String::from_utf8(out).ok(),
            b'\\' => match it.next()? {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'v' => out.push(0x0b),
                b'f' => out.push(0x0c),
                b'x' => {
                    let hex: String = [it.next()?, it.next()?]
                        .iter()
                        .map(|&c| c as char)
                        .collect();
                    out.push(u8::from_str_radix(&hex, 16).ok()?);
                }
                d @ b'0'..=b'7' => {
                    let mut v = u32::from(d - b'0');
                    for _ in 0..2 {
                        match it.peek() {
                            Some(&o @ b'0'..=b'7') => {
                                v = v * 8 + u32::from(o - b'0');
                                it.next();
                            }
                            _ => break,
                        }
                    }
                    out.push(v as u8);
                }
                other => out.push(other),
            },
            other => out.push(other),
        }
    }
    None
}

/// `a/./b/../c` → `a/c`, without touching the file system.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
