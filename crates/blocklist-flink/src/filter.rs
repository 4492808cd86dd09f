//! Which failures say something about the machine.
//!
//! A failure counts when its exception's class is one of the platform's (the JDK, Flink,
//! Hadoop, Netty, `RocksDB`: what a broken disk, NIC, GPU or JVM throws) and not one of
//! those that are certainly the job's own fault or certainly not the machine's (a null
//! pointer, a bad cast, a checkpoint declined, a cancellation). A job's own exception class
//! (`com.acme.BadRecord`) is its code's, and never counts. Flink's failure labels (set by a
//! `FailureEnricher`, FLIP-304) refine it: a failure labelled `type=User` never counts, and
//! when labels are required only a failure carrying one of them does.
//!
//! Patterns name a class exactly, or a prefix ending in `*` (`java.io.*`).

use crate::history::Failure;

/// The classes whose failures may count: the platform's.
pub const DEFAULT_COUNT: &[&str] = &[
    "java.*",
    "javax.*",
    "jdk.*",
    "sun.*",
    "org.apache.flink.*",
    "org.apache.hadoop.*",
    "org.apache.pekko.*",
    "io.netty.*",
    "org.rocksdb.*",
];

/// The platform's classes that are certainly the job's fault, or certainly not the
/// machine's.
pub const DEFAULT_IGNORE: &[&str] = &[
    // What the job's code does wrong, whatever machine runs it.
    "java.lang.ArithmeticException",
    "java.lang.ArrayIndexOutOfBoundsException",
    "java.lang.ArrayStoreException",
    "java.lang.ClassCastException",
    "java.lang.ClassNotFoundException",
    "java.lang.IllegalArgumentException",
    "java.lang.IllegalStateException",
    "java.lang.IndexOutOfBoundsException",
    "java.lang.NegativeArraySizeException",
    "java.lang.NoClassDefFoundError",
    "java.lang.NoSuchFieldError",
    "java.lang.NoSuchMethodError",
    "java.lang.NullPointerException",
    "java.lang.NumberFormatException",
    "java.lang.StackOverflowError",
    "java.lang.StringIndexOutOfBoundsException",
    "java.lang.UnsupportedOperationException",
    "java.util.ConcurrentModificationException",
    "java.util.NoSuchElementException",
    "org.apache.flink.api.common.InvalidProgramException",
    "org.apache.flink.api.common.typeutils.*",
    "org.apache.flink.types.*",
    // Not the machine: checkpoints declined or expired, a job cancelled or suspended, no
    // slots, a job whose recovery is suppressed (its task's own failure is counted).
    "org.apache.flink.runtime.checkpoint.*",
    "org.apache.flink.runtime.execution.CancelTaskException",
    "java.util.concurrent.CancellationException",
    "org.apache.flink.runtime.jobmanager.scheduler.NoResourceAvailableException",
    "org.apache.flink.runtime.JobException",
    "org.apache.flink.util.FlinkJobCancellationException",
];

/// The labels that say a failure is the job's: never counted.
pub const DEFAULT_IGNORE_LABELS: &[&str] = &["type=User"];

/// A class name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let body = text.strip_suffix('*').unwrap_or(text);
        if text.is_empty() || body.contains('*') || text.chars().any(char::is_whitespace) {
            return Err(format!(
                "`{text}` is not a class name or a prefix ending in `*`"
            ));
        }
        Ok(Pattern(text.to_owned()))
    }

    pub fn matches(&self, class: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => class.starts_with(prefix),
            None => class == self.0,
        }
    }
}

/// A label `KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub key: String,
    pub value: String,
}

impl Label {
    pub fn parse(text: &str) -> Result<Label, String> {
        match text.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok(Label {
                key: key.to_owned(),
                value: value.to_owned(),
            }),
            _ => Err(format!("`{text}` is not KEY=VALUE")),
        }
    }

    fn on(&self, failure: &Failure) -> bool {
        failure.labels.get(&self.key) == Some(&self.value)
    }
}

/// Which failures count.
#[derive(Debug, Clone)]
pub struct Filter {
    pub count: Vec<Pattern>,
    pub ignore: Vec<Pattern>,
    /// When not empty, only a failure carrying one of these counts.
    pub require_labels: Vec<Label>,
    pub ignore_labels: Vec<Label>,
}

impl Default for Filter {
    fn default() -> Filter {
        let patterns = |all: &[&str]| all.iter().map(|p| Pattern((*p).to_owned())).collect();
        Filter {
            count: patterns(DEFAULT_COUNT),
            ignore: patterns(DEFAULT_IGNORE),
            require_labels: Vec::new(),
            ignore_labels: DEFAULT_IGNORE_LABELS
                .iter()
                .map(|l| Label::parse(l).expect("the default labels are KEY=VALUE"))
                .collect(),
        }
    }
}

/// Why a failure does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// Its class is not among those counted (the job's own).
    Class,
    /// Its class is among those ignored.
    Ignored,
    /// A label says it is the job's, or it lacks every required one.
    Label,
}

impl Ignored {
    pub fn as_str(self) -> &'static str {
        match self {
            Ignored::Class => "user-class",
            Ignored::Ignored => "ignored-class",
            Ignored::Label => "label",
        }
    }
}

impl Filter {
    /// `Ok` when `failure` counts.
    pub fn judge(&self, failure: &Failure) -> Result<(), Ignored> {
        if self.ignore_labels.iter().any(|l| l.on(failure)) {
            return Err(Ignored::Label);
        }
        if !self.require_labels.is_empty() && !self.require_labels.iter().any(|l| l.on(failure)) {
            return Err(Ignored::Label);
        }
        if self.ignore.iter().any(|p| p.matches(&failure.exception)) {
            return Err(Ignored::Ignored);
        }
        if !self.count.iter().any(|p| p.matches(&failure.exception)) {
            return Err(Ignored::Class);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(exception: &str, labels: &[(&str, &str)]) -> Failure {
        Failure {
            job: "j".into(),
            task_manager: "tm".into(),
            timestamp: 1,
            exception: exception.into(),
            message: String::new(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn the_defaults_count_the_platforms_failures_and_leave_out_the_jobs() {
        let filter = Filter::default();
        for counted in [
            "java.io.IOException",
            "java.lang.OutOfMemoryError",
            "java.util.concurrent.TimeoutException",
            "org.apache.flink.runtime.io.network.netty.exception.RemoteTransportException",
            "java.lang.RuntimeException",
        ] {
            assert_eq!(filter.judge(&failure(counted, &[])), Ok(()), "{counted}");
        }
        for (ignored, why) in [
            ("com.acme.BadRecordException", Ignored::Class),
            (
                "blocklist.flinkharness.UserFunctionException",
                Ignored::Class,
            ),
            ("java.lang.NullPointerException", Ignored::Ignored),
            (
                "org.apache.flink.runtime.checkpoint.CheckpointException",
                Ignored::Ignored,
            ),
            ("org.apache.flink.runtime.JobException", Ignored::Ignored),
        ] {
            assert_eq!(filter.judge(&failure(ignored, &[])), Err(why), "{ignored}");
        }
        assert_eq!(
            filter.judge(&failure("java.io.IOException", &[("type", "User")])),
            Err(Ignored::Label),
            "the enricher's word wins"
        );
    }

    #[test]
    fn required_labels_admit_only_the_failures_carrying_one() {
        let filter = Filter {
            require_labels: vec![Label::parse("type=System").unwrap()],
            ..Filter::default()
        };
        assert_eq!(
            filter.judge(&failure(
                "java.lang.RuntimeException",
                &[("type", "System")]
            )),
            Ok(())
        );
        assert_eq!(
            filter.judge(&failure("java.lang.RuntimeException", &[])),
            Err(Ignored::Label)
        );
    }

    #[test]
    fn patterns_are_a_class_or_a_prefix() {
        assert!(Pattern::parse("java.io.*")
            .unwrap()
            .matches("java.io.IOException"));
        assert!(!Pattern::parse("java.io.IOException")
            .unwrap()
            .matches("java.io.IOExceptionX"));
        assert!(Pattern::parse("java.*.Foo").is_err());
        assert!(Pattern::parse("").is_err());
        assert!(Label::parse("=x").is_err());
        assert_eq!(Label::parse("type=System").unwrap().value, "System");
    }
}
