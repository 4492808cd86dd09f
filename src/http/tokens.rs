//! The token file's syntax: one entry a line, blank lines and `#` comments skipped.
//!
//! ```text
//! TOKEN                               a writer without a name (every file from before roles)
//! TOKEN name=NAME role=ROLE           fields after the token, each optional, in any order
//! subject=CERT-NAME name=NAME role=ROLE
//!                                     a client certificate (--tls-client-ca) that names
//!                                     CERT-NAME: a subject alternative name (DNS, URI or
//!                                     email) or its common name; NAME defaults to CERT-NAME
//! ```
//!
//! ROLE is `admin`, `writer`, `enforcer`, `detector` or `reader`; a `detector` needs a
//! name (a certificate's is its CERT-NAME), which is the source of what it reports. The token is the first word whatever it holds (a
//! base64 token may end in `=`), unless that word starts with `subject=`. A bad entry stops
//! the daemon at start with the line number and the field, never the token.

use std::collections::HashMap;
use std::path::Path;

use super::caller::{Caller, Role};

/// What a caller presents.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Credential {
    /// A bearer token.
    Token(Vec<u8>),
    /// A client certificate the client CA verified, one of whose names is this.
    Subject(String),
}

/// One token or certificate and its holder.
#[derive(Clone)]
pub(super) struct Entry {
    pub credential: Credential,
    pub caller: Caller,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token itself.
        f.debug_struct("Entry")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

/// Reads and parses the token file. The error names the file, and the line and field of a
/// bad entry.
pub(super) fn read(path: &Path) -> Result<Vec<Entry>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let entries = parse(&text).map_err(|(line, problem)| {
        format!("the token file {}, line {line}: {problem}", path.display())
    })?;
    if entries.is_empty() {
        return Err(format!("the token file {} holds no token", path.display()));
    }
    Ok(entries)
}

/// The fields an entry may carry after its token.
const NAME: &str = "name";
const ROLE: &str = "role";
/// The first word of a certificate's entry starts with `subject=`.
const SUBJECT: &str = "subject=";

/// What is wrong with one line of the token file. Nothing here holds the token: a word is
/// repeated only when it cannot be one (see [`shown`]).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Problem {
    #[error("the line starts with the field `{0}=`, but the token comes first: TOKEN name=NAME role=ROLE")]
    NoToken(&'static str),
    #[error("word {0} after the token is not a field (name=NAME or role=ROLE)")]
    NotAField(usize),
    #[error("word {position} after the token is an unknown field{}; the fields are `name` and `role`", named(.key.as_deref()))]
    UnknownField {
        position: usize,
        key: Option<String>,
    },
    #[error("the field `{0}` is given twice")]
    DuplicateField(&'static str),
    #[error("the field `role` must be admin, writer, enforcer, detector or reader{}", not(.0.as_deref()))]
    BadRole(Option<String>),
    #[error("a detector reports under its name: give it one (name=NAME)")]
    UnnamedDetector,
    #[error("the field `name` is empty")]
    EmptyName,
    #[error("`subject=` names no certificate name: subject=CERT-NAME name=NAME role=ROLE")]
    EmptySubject,
    #[error("the token of line {first} is repeated with another name or role")]
    Conflict { first: usize },
}

/// A word of a bad line, as an error may repeat it: `None` when it could be part of a token
/// (one with a blank in it). A misspelt field or role is a short word of letters; a token's
/// characters are random, with digits among them, and it is long.
fn shown(word: &str) -> Option<String> {
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphabetic() || c == '-' || c == '_');
    (plain && word.len() <= 12).then(|| word.to_owned())
}

/// An unknown field's key in a message.
fn named(key: Option<&str>) -> String {
    match key {
        Some(key) => format!(" `{key}`"),
        None => " (not repeated here: it may be part of a token)".to_owned(),
    }
}

/// A bad role in a message.
fn not(value: Option<&str>) -> String {
    match value {
        Some("") => " (it is empty)".to_owned(),
        Some(value) => format!(", not `{value}`"),
        None => " (its value is not repeated here: it may be part of a token)".to_owned(),
    }
}

/// The entries of a token file's text, or the (1-based) number of the first bad line.
pub(super) fn parse(text: &str) -> Result<Vec<Entry>, (usize, Problem)> {
    let mut entries: Vec<Entry> = Vec::new();
    // Token → (its line, its entry), to tell a harmless repeat from a conflicting one.
    let mut seen: HashMap<&str, (usize, usize)> = HashMap::new();
    for (number, line) in (1..).zip(text.lines()) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (token, entry) = parse_line(line).map_err(|problem| (number, problem))?;
        match seen.get(token) {
            // The same token twice with the same holder (possible in files written before
            // names and roles): one entry is enough.
            Some(&(_, index)) if entries[index].caller == entry.caller => {}
            // Which role would win would depend on the order of the lines: refuse.
            Some(&(first, _)) => return Err((number, Problem::Conflict { first })),
            None => {
                seen.insert(token, (number, entries.len()));
                entries.push(entry);
            }
        }
    }
    Ok(entries)
}

/// One line that is neither blank nor a comment: the token, then fields in any order.
fn parse_line(line: &str) -> Result<(&str, Entry), Problem> {
    let mut words = line.split_whitespace();
    let token = words.next().expect("the line is not blank");
    // A forgotten token would make the first field the token (and the line valid).
    for field in [NAME, ROLE] {
        if token
            .strip_prefix(field)
            .is_some_and(|v| v.starts_with('='))
        {
            return Err(Problem::NoToken(field));
        }
    }
    let mut name = None;
    let mut role = None;
    for (position, word) in (1..).zip(words) {
        let Some((key, value)) = word.split_once('=') else {
            return Err(Problem::NotAField(position));
        };
        match key {
            NAME if name.is_some() => return Err(Problem::DuplicateField(NAME)),
            NAME if value.is_empty() => return Err(Problem::EmptyName),
            NAME => name = Some(value.to_owned()),
            ROLE if role.is_some() => return Err(Problem::DuplicateField(ROLE)),
            ROLE => {
                role = Some(
                    value
                        .parse::<Role>()
                        .map_err(|()| Problem::BadRole(shown(value)))?,
                );
            }
            other => {
                return Err(Problem::UnknownField {
                    position,
                    key: shown(other),
                })
            }
        }
    }
    let role = role.unwrap_or(Role::Writer);
    if role == Role::Detector && name.is_none() && !token.starts_with(SUBJECT) {
        return Err(Problem::UnnamedDetector);
    }
    let entry = match token.strip_prefix(SUBJECT) {
        Some("") => return Err(Problem::EmptySubject),
        Some(subject) => Entry {
            credential: Credential::Subject(subject.to_owned()),
            caller: Caller::with_certificate(name.unwrap_or_else(|| subject.to_owned()), role),
        },
        None => Entry {
            credential: Credential::Token(token.as_bytes().to_vec()),
            caller: Caller::with_token(name, role),
        },
    };
    Ok((token, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn callers(text: &str) -> Vec<(String, Caller)> {
        parse(text)
            .unwrap()
            .into_iter()
            .map(|e| match e.credential {
                Credential::Token(token) => (String::from_utf8(token).unwrap(), e.caller),
                Credential::Subject(name) => (format!("{SUBJECT}{name}"), e.caller),
            })
            .collect()
    }

    fn problem(text: &str) -> (usize, String) {
        let (line, problem) = parse(text).expect_err("a bad file");
        (line, problem.to_string())
    }

    #[test]
    fn a_bare_token_is_an_unnamed_writer() {
        // Comments, blank lines and surrounding blanks are skipped, as they always were;
        // a token may hold `=` (base64 padding).
        let text = "# rotated\n\n  old  \r\nbase64tok==\n";
        assert_eq!(
            callers(text),
            [
                ("old".into(), Caller::with_token(None, Role::Writer)),
                ("base64tok==".into(), Caller::with_token(None, Role::Writer)),
            ]
        );
    }

    #[test]
    fn fields_give_a_name_and_a_role_in_any_order() {
        let text = "t1 name=alice role=admin\n\
                    t2 role=reader name=grafana\n\
                    t3\trole=writer\n\
                    t4 name=ci\n\
                    t5== role=reader\n";
        let named = |name: &str, role| Caller::with_token(Some(name.into()), role);
        assert_eq!(
            callers(text),
            [
                ("t1".into(), named("alice", Role::Admin)),
                ("t2".into(), named("grafana", Role::Reader)),
                ("t3".into(), Caller::with_token(None, Role::Writer)),
                ("t4".into(), named("ci", Role::Writer)),
                ("t5==".into(), Caller::with_token(None, Role::Reader)),
            ]
        );
    }

    #[test]
    fn a_repeated_token_is_one_entry_unless_its_holder_differs() {
        assert_eq!(callers("t\nt\nt role=writer\n").len(), 1);
        assert_eq!(
            problem("a\nt name=x\nt name=y\n"),
            (
                3,
                "the token of line 2 is repeated with another name or role".into()
            )
        );
        assert_eq!(problem("t\nt role=admin\n").0, 2);
    }

    #[test]
    fn each_bad_entry_names_its_line_and_field() {
        let cases = [
            (
                "ok\n\nsecret-1 colour=blue\n",
                3,
                "word 1 after the token is an unknown field `colour`; the fields are `name` and \
                 `role`",
            ),
            (
                "secret-1 name=a name=b",
                1,
                "the field `name` is given twice",
            ),
            (
                "secret-1 role=admin role=reader",
                1,
                "the field `role` is given twice",
            ),
            (
                "secret-1 role=detector",
                1,
                "a detector reports under its name: give it one (name=NAME)",
            ),
            (
                "secret-1 role=root",
                1,
                "the field `role` must be admin, writer, enforcer, detector or reader, not `root`",
            ),
            (
                "secret-1 role=",
                1,
                "the field `role` must be admin, writer, enforcer, detector or reader (it is empty)",
            ),
            (
                "secret-1 role=Admin",
                1,
                "the field `role` must be admin, writer, enforcer, detector or reader, not `Admin`",
            ),
            ("# c\nsecret-1 name=", 2, "the field `name` is empty"),
            (
                "secret-1 name=a admin",
                1,
                "word 2 after the token is not a field (name=NAME or role=ROLE)",
            ),
            (
                "name=alice role=admin",
                1,
                "the line starts with the field `name=`, but the token comes first: \
                 TOKEN name=NAME role=ROLE",
            ),
            (
                "role=admin",
                1,
                "the line starts with the field `role=`, but the token comes first: \
                 TOKEN name=NAME role=ROLE",
            ),
        ];
        for (text, line, message) in cases {
            assert_eq!(problem(text), (line, message.to_owned()), "{text:?}");
            assert!(!message.contains("secret"), "{message}");
        }
    }

    #[test]
    fn a_word_that_may_be_part_of_a_token_is_not_repeated() {
        // A token with a blank in it: its second half reads as a field.
        assert_eq!(
            problem("Xk7qP2vLm9 Zr4tW8=yQ1\n"),
            (
                1,
                "word 1 after the token is an unknown field (not repeated here: it may be part \
                 of a token); the fields are `name` and `role`"
                    .into()
            )
        );
        for text in [
            "t second-half-of-the=token",
            "t role=second-half-of-the-token",
            "t role=Zr4tW8",
            "first-half second-half",
        ] {
            let (_, message) = problem(text);
            assert!(
                !message.contains("half") && !message.contains("Zr4"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_file_error_names_the_file_and_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "s3cret-token role=boss\n").unwrap();
        let message = read(&path).unwrap_err();
        assert_eq!(
            message,
            format!(
                "the token file {}, line 1: the field `role` must be admin, writer, enforcer, detector or reader, \
                 not `boss`",
                path.display()
            )
        );
        std::fs::write(&path, "# none\n\n").unwrap();
        let message = read(&path).unwrap_err();
        assert!(message.ends_with("holds no token"), "{message}");
    }

    #[test]
    fn a_subject_line_is_a_certificate_named_by_default_after_its_subject() {
        assert_eq!(
            callers(
                "subject=detector-7.example role=reader\n\
                 subject=grafana.example name=grafana\n\
                 tok name=ops role=admin"
            ),
            [
                (
                    "subject=detector-7.example".into(),
                    Caller::with_certificate("detector-7.example".into(), Role::Reader)
                ),
                (
                    "subject=grafana.example".into(),
                    Caller::with_certificate("grafana".into(), Role::Writer)
                ),
                (
                    "tok".into(),
                    Caller::with_token(Some("ops".into()), Role::Admin)
                ),
            ]
        );
        assert_eq!(
            problem("subject= role=reader"),
            (
                1,
                "`subject=` names no certificate name: subject=CERT-NAME name=NAME role=ROLE"
                    .into()
            )
        );
        assert_eq!(problem("subject=a role=reader\nsubject=a role=admin").0, 2);
    }
}
