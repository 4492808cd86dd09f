//! The daemon's orchestration: from its flags to a listener serving the store, and back
//! down at its stop.
//!
//! # Layout
//! - `run.rs`: [`run`]: authentication, the listener and its TLS, the store (on sled) or
//!   the roles (on etcd), serving until the shutdown future resolves, then stopping once.
//! - `app.rs`: what one role serves: the writer's store with its sweeper (`Running`, and
//!   its one way to shut down), and the application over a store.
//! - `roles.rs`: on etcd, the roles in turn (replica, writer, replica again) on the same
//!   listener: the loop that does each step's I/O.
//! - `transitions.rs`: which role and step come next, a pure function of where the daemon
//!   stands and what it observed, with a table test of every transition.
//! - `listener.rs`: binding `--listen` and the listener's TLS.
//! - `error.rs`: [`Error`], why the daemon could not start or stopped.

mod app;
mod error;
mod listener;
mod roles;
mod run;
mod transitions;

pub use error::Error;
pub use run::run;
