//! Who sent a request, as handlers see it: the name and role of its token.
//!
//! The auth middleware (`super::auth`) puts a [`Caller`] into the request's extensions once it
//! has accepted a token. A handler takes `caller: Caller` as an argument and calls
//! [`Caller::require`] before an action that needs more than the route's own role (the
//! middleware already refuses a `reader` token on a change). A request the middleware did not
//! check has no extension; what it counts as depends on the daemon ([`TokenCheck`]): without
//! a token file every caller is trusted, with one an unchecked caller may only read.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;

use super::error::ApiError;

/// What a token may do. `Reader` reads; `Enforcer` and `Detector` each read and do their
/// one kind of write, and neither the other's; `Writer` does both and every other write but
/// the admin ones; `Admin` everything. Not a total order: ask [`Role::grants`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Reads only (listings, checks, the feed).
    Reader,
    /// Reads, enforcement statuses (`/enforcement`) and task manager registrations
    /// (`/taskmanagers`): what an enforcer observes in its cluster and reports, never a
    /// block or an unblock.
    Enforcer,
    /// Reads, and reports and retractions of reports under its own name only
    /// (`POST /blocklist/{kind}`, `…/retract`, Alertmanager's webhook): what a detector
    /// sees, never an unblock of another's block, a force, the policy, the allowlist or a
    /// registration.
    Detector,
    /// Every read and write except the admin ones. A token without a role has this one.
    Writer,
    /// Everything, including what bypasses or changes the guardrails.
    Admin,
}

impl Role {
    /// Every role, the least first.
    #[cfg(test)]
    pub const ALL: [Role; 5] = [
        Role::Reader,
        Role::Enforcer,
        Role::Detector,
        Role::Writer,
        Role::Admin,
    ];

    /// As written in the token file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Enforcer => "enforcer",
            Role::Detector => "detector",
            Role::Writer => "writer",
            Role::Admin => "admin",
        }
    }

    /// The roles that grant this one, with an article, for "needs an admin token". The
    /// side roles name the writer too: "needs a detector token" would send a reader's owner
    /// for the narrower token when the one they hold elsewhere already does it.
    fn with_article(self) -> &'static str {
        match self {
            Role::Reader => "a reader",
            Role::Enforcer => "an enforcer or writer",
            Role::Detector => "a detector or writer",
            Role::Writer => "a writer",
            Role::Admin => "an admin",
        }
    }

    /// Whether this role may do what `needed` may: itself, and what every role below it
    /// may (`Admin` ⊇ `Writer` ⊇ `Enforcer`, `Detector` ⊇ `Reader`).
    pub fn grants(self, needed: Role) -> bool {
        match self {
            Role::Admin => true,
            Role::Writer => needed != Role::Admin,
            Role::Enforcer | Role::Detector => needed == self || needed == Role::Reader,
            Role::Reader => needed == Role::Reader,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = ();

    fn from_str(s: &str) -> Result<Role, ()> {
        match s {
            "reader" => Ok(Role::Reader),
            "enforcer" => Ok(Role::Enforcer),
            "detector" => Ok(Role::Detector),
            "writer" => Ok(Role::Writer),
            "admin" => Ok(Role::Admin),
            _ => Err(()),
        }
    }
}

/// The sender of a request. An axum extractor that never fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's `name=`, for logs and `addedBy`; `None` for a token without one, and for
    /// a caller who sent no token.
    pub name: Option<String>,
    pub role: Role,
    /// What was checked: a refusal says which. Private, so that a `Caller` is built only by
    /// the constructors below.
    checked: Checked,
}

/// What identified a [`Caller`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    Nothing,
    Token,
    Certificate,
}

impl Caller {
    /// Every caller of a daemon without a token file: nothing can be checked, so nothing is
    /// refused (only loopback may be bound then, unless the operator says the network is
    /// trusted).
    pub fn open() -> Caller {
        Caller {
            name: None,
            role: Role::Admin,
            checked: Checked::Nothing,
        }
    }

    /// A caller who sent no token to a daemon with a token file: only a read gets through
    /// unchecked (without `--auth-reads`), so reading is all it may do.
    pub fn anonymous() -> Caller {
        Caller {
            name: None,
            role: Role::Reader,
            checked: Checked::Nothing,
        }
    }

    /// The holder of an accepted token.
    pub fn with_token(name: Option<String>, role: Role) -> Caller {
        Caller {
            name,
            role,
            checked: Checked::Token,
        }
    }

    /// The holder of a verified client certificate the token file names.
    pub fn with_certificate(name: String, role: Role) -> Caller {
        Caller {
            name: Some(name),
            role,
            checked: Checked::Certificate,
        }
    }

    /// Refuses with 403 unless this caller has at least `role`. `what` names the action, as
    /// the subject of "… needs an admin token": `caller.require(Role::Admin, "forcing past a
    /// guardrail")?`.
    pub fn require(&self, role: Role, what: &str) -> Result<(), ApiError> {
        if self.role.grants(role) {
            return Ok(());
        }
        let why = match self.checked {
            Checked::Token => format!("this token's role is {}", self.role),
            Checked::Certificate => format!("this client certificate's role is {}", self.role),
            Checked::Nothing => "no token was sent".to_owned(),
        };
        Err(ApiError::Forbidden(format!(
            "{what} needs {} token; {why}",
            role.with_article()
        )))
    }
}

/// Whether this daemon checks tokens, which decides who a request without a [`Caller`]
/// extension is. Taken from the router's state (`AppState` implements `FromRef` for it), not
/// from a layer, so that no setup of the router can turn an unchecked read into an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCheck {
    /// No token file: every caller is [`Caller::open`].
    Off,
    /// A token file: a caller the middleware let through unchecked is [`Caller::anonymous`].
    On,
}

impl<S> FromRequestParts<S> for Caller
where
    S: Send + Sync,
    TokenCheck: FromRef<S>,
{
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Caller, Infallible> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        Ok(match TokenCheck::from_ref(state) {
            TokenCheck::Off => Caller::open(),
            TokenCheck::On => Caller::anonymous(),
        })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{Request, StatusCode};

    use super::*;

    #[test]
    fn roles_grant_what_is_below_them_and_enforcers_and_detectors_not_each_other() {
        use Role::{Admin, Detector, Enforcer, Reader, Writer};
        // (role, what it grants) for every pair.
        let table = [
            (Reader, vec![Reader]),
            (Enforcer, vec![Reader, Enforcer]),
            (Detector, vec![Reader, Detector]),
            (Writer, vec![Reader, Enforcer, Detector, Writer]),
            (Admin, vec![Reader, Enforcer, Detector, Writer, Admin]),
        ];
        for (role, granted) in table {
            for needed in Role::ALL {
                assert_eq!(
                    role.grants(needed),
                    granted.contains(&needed),
                    "{role} {needed}"
                );
            }
        }
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert_eq!("Admin".parse::<Role>(), Err(()));
        assert_eq!("".parse::<Role>(), Err(()));
    }

    fn refusal(result: Result<(), ApiError>) -> String {
        let error = result.unwrap_err();
        assert_eq!(error.status(), StatusCode::FORBIDDEN);
        match error {
            ApiError::Forbidden(message) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn require_passes_the_role_and_above_and_names_what_is_missing() {
        let writer = Caller::with_token(Some("ci".into()), Role::Writer);
        assert!(writer.require(Role::Reader, "reading").is_ok());
        assert!(writer.require(Role::Writer, "writing").is_ok());
        assert_eq!(
            refusal(writer.require(Role::Admin, "forcing past a guardrail")),
            "forcing past a guardrail needs an admin token; this token's role is writer"
        );
        let reader = Caller::with_token(None, Role::Reader);
        assert_eq!(
            refusal(reader.require(Role::Writer, "DELETE /blocklist/nodes/n1")),
            "DELETE /blocklist/nodes/n1 needs a writer token; this token's role is reader"
        );
        assert_eq!(
            refusal(reader.require(Role::Detector, "POST /blocklist/nodes")),
            "POST /blocklist/nodes needs a detector or writer token; this token's role is reader"
        );
        assert_eq!(
            refusal(Caller::anonymous().require(Role::Admin, "changing the policy")),
            "changing the policy needs an admin token; no token was sent"
        );
        assert!(Caller::open().require(Role::Admin, "anything").is_ok());
    }

    async fn extracted(request: Request<()>, check: TokenCheck) -> Caller {
        let (mut parts, ()) = request.into_parts();
        let Ok(caller) = Caller::from_request_parts(&mut parts, &check).await;
        caller
    }

    #[tokio::test]
    async fn the_extractor_takes_the_extension_or_the_daemons_default() {
        let alice = Caller::with_token(Some("alice".into()), Role::Admin);
        let mut request = Request::new(());
        request.extensions_mut().insert(alice.clone());
        assert_eq!(extracted(request, TokenCheck::On).await, alice);

        assert_eq!(
            extracted(Request::new(()), TokenCheck::Off).await,
            Caller::open()
        );
        // With a token file, a request the middleware let through unchecked is no admin.
        let unchecked = extracted(Request::new(()), TokenCheck::On).await;
        assert_eq!(unchecked, Caller::anonymous());
        assert_eq!((unchecked.name, unchecked.role), (None, Role::Reader));
    }
}
