//! Listings produced in bounded chunks, so that memory per lister is one chunk, not the
//! whole list.
//!
//! A [`Listing`] is a body described as parts: literal text (`{"blockedNodes":[`) and scans
//! (the active items of a kind, the registrations), each element rendered by a function of
//! whoever owns its shape. [`Listing::next_chunk`] appends about [`CHUNK_BYTES`] of the body
//! and returns; the next call resumes the scan after the last id written (the store holds
//! nothing between calls, see [`Store::scan_items`]). The HTTP layer sends each chunk as it
//! is produced (`http::AppState::streamed`); the offline export drains it into one string.
//!
//! A listing's `now` is fixed when it is built: one `now` for the whole body, so an item
//! that expires while the body is produced is either listed in full or not at all.

use std::collections::VecDeque;

use crate::model::{Item, Kind};
use crate::provenance::PastBlock;
use crate::store::{self, Store};

/// A chunk ends after the element that takes it to this many bytes. Each chunk costs a few
/// thread wake-ups between the scan, hyper and the socket (~0.1 ms of CPU on a 2-core VM):
/// at 64 KiB a 100,000-item listing (13 MB) spent ~15% more CPU than built whole, at
/// 256 KiB ~5%, while memory per lister stays around a megabyte.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// A chunk ends after this many elements, whatever their size: node entries cost an index
/// scan each, so this bounds the time of one chunk as well.
pub const CHUNK_ELEMENTS: usize = 2048;

/// Writes one item (its JSON, plus a newline for JSON lines). The store is there for node
/// entries, which also list the task managers registered on the node.
pub type RenderItem = fn(&Store, Kind, Item, &mut Vec<u8>) -> store::Result<()>;

/// Writes one registration `(task manager, node)`.
pub type RenderRegistration = fn(&str, &str, &mut Vec<u8>);

/// Writes one past block of an id of the kind.
pub type RenderPast = fn(Kind, PastBlock, &mut Vec<u8>);

/// One part of a listing's body.
enum Part {
    /// Literal bytes.
    Text(Vec<u8>),
    /// The active items of a kind, in id order, `separator` between two of them.
    Items {
        kind: Kind,
        render: RenderItem,
        separator: &'static [u8],
    },
    /// Every registration, in task manager order, `separator` between two of them.
    Registrations {
        render: RenderRegistration,
        separator: &'static [u8],
    },
    /// Every past block, by kind, id and age (oldest first per id), one per line.
    Past { render: RenderPast },
}

/// A body produced chunk by chunk; see the module documentation.
pub struct Listing {
    parts: VecDeque<Part>,
    now: i64,
    /// The last id the scan at the front of `parts` wrote: where its next chunk resumes,
    /// and whether it needs a separator before its next element.
    after: Option<String>,
    /// How many scans [`Listing::resume_at`] left out: the index of the first scan left.
    skipped: usize,
}

/// Where a page of a listing ends and the next begins: its `scan`-th scan (counted from 0
/// in the order the listing appends them), after the element at `after` (from its first
/// when `None`). Positions are ids (or, for past blocks, their keys in hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    pub scan: usize,
    pub after: Option<String>,
}

/// What a scan tells whoever drives it, element by element.
enum Step<'a> {
    /// An element comes next, with the separator its listing puts between two: whether to
    /// write it (false stops the scan before it, unwritten).
    Before(&'a [u8]),
    /// An element was written, at this position: whether to go on.
    After(String),
}

impl Listing {
    /// An empty body listing what is active at `now`.
    pub fn new(now: i64) -> Listing {
        Listing {
            parts: VecDeque::new(),
            now,
            after: None,
            skipped: 0,
        }
    }

    /// Appends literal text.
    pub fn text(mut self, text: impl Into<Vec<u8>>) -> Listing {
        self.parts.push_back(Part::Text(text.into()));
        self
    }

    /// Appends the active items of `kind`, each written by `render`.
    pub fn items(mut self, kind: Kind, render: RenderItem, separator: &'static [u8]) -> Listing {
        self.parts.push_back(Part::Items {
            kind,
            render,
            separator,
        });
        self
    }

    /// Appends every registration, each written by `render`.
    pub fn registrations(
        mut self,
        render: RenderRegistration,
        separator: &'static [u8],
    ) -> Listing {
        self.parts
            .push_back(Part::Registrations { render, separator });
        self
    }

    /// Appends every past block, each written by `render`.
    pub fn past_blocks(mut self, render: RenderPast) -> Listing {
        self.parts.push_back(Part::Past { render });
        self
    }

    /// Appends the next chunk of the body to `out`: at least one element or piece of text,
    /// and no more than it takes to reach [`CHUNK_BYTES`] or [`CHUNK_ELEMENTS`]. Returns
    /// true when the body is complete (nothing is left for another call).
    pub fn next_chunk(&mut self, store: &Store, out: &mut Vec<u8>) -> store::Result<bool> {
        let start = out.len();
        let mut elements = 0;
        let now = self.now;
        while let Some(part) = self.parts.front() {
            if out.len() - start >= CHUNK_BYTES || elements >= CHUNK_ELEMENTS {
                return Ok(false);
            }
            let resume = self.after.take();
            let resumed = resume.is_some();
            let mut last: Option<String> = None;
            let finished =
                part.scan(store, resume.as_deref(), now, out, |step, out| match step {
                    // Before an element: the separator, unless it is the scan's first.
                    Step::Before(separator) => {
                        if resumed || last.is_some() {
                            out.extend_from_slice(separator);
                        }
                        true
                    }
                    // After an element: whether the chunk has room for another.
                    Step::After(position) => {
                        last = Some(position);
                        elements += 1;
                        out.len() - start < CHUNK_BYTES && elements < CHUNK_ELEMENTS
                    }
                })?;
            if finished {
                self.parts.pop_front();
            } else {
                // Where the next chunk resumes; a scan stopped only after writing an element.
                self.after = last.or(resume);
            }
        }
        Ok(true)
    }

    /// How many scans the listing has (its text parts aside).
    pub fn scans(&self) -> usize {
        self.skipped
            + self
                .parts
                .iter()
                .filter(|part| !matches!(part, Part::Text(_)))
                .count()
    }

    /// Starts the listing at `resume` (a [`Resume`] an earlier [`Listing::page`] of the same
    /// listing returned): the scans before its scan are left out (their text around them
    /// stays, so the body keeps its shape), and its scan starts after its position.
    #[must_use]
    pub fn resume_at(mut self, resume: &Resume) -> Listing {
        let mut scans = 0;
        self.parts.retain(|part| {
            if matches!(part, Part::Text(_)) {
                return true;
            }
            scans += 1;
            scans > resume.scan
        });
        self.after.clone_from(&resume.after);
        self.skipped = resume.scan;
        self
    }

    /// One page of the listing: the body with at most `limit` elements (its text whole, its
    /// scans cut where the page is full), and where the next page resumes — `None` when this
    /// page holds the last element. Built whole in memory: a page is bounded by `limit`.
    /// Retry-safe: it may be called again (the store's [`Store::consistent_read`] does).
    pub fn page(&self, store: &Store, limit: usize) -> store::Result<(Vec<u8>, Option<Resume>)> {
        let mut out = Vec::new();
        let mut count = 0;
        let mut next = None;
        let mut resume = self.after.clone();
        let mut scan = self.skipped;
        for part in &self.parts {
            if matches!(part, Part::Text(_)) || next.is_none() {
                let mut last: Option<String> = None;
                let finished =
                    part.scan(store, resume.as_deref(), self.now, &mut out, |step, out| {
                        match step {
                            // A full page stops before an element, which proves there is
                            // more: a page that ends on the list's last element says so.
                            Step::Before(_) if count == limit => false,
                            Step::Before(separator) => {
                                if last.is_some() {
                                    out.extend_from_slice(separator);
                                }
                                true
                            }
                            Step::After(position) => {
                                last = Some(position);
                                count += 1;
                                true
                            }
                        }
                    })?;
                if !finished {
                    next = Some(Resume {
                        scan,
                        after: last.or_else(|| resume.clone()),
                    });
                }
            }
            if !matches!(part, Part::Text(_)) {
                scan += 1;
                resume = None;
            }
        }
        Ok((out, next))
    }

    /// The whole body at once (the offline export, tests).
    pub fn collect(mut self, store: &Store) -> store::Result<Vec<u8>> {
        let mut out = Vec::new();
        while !self.next_chunk(store, &mut out)? {}
        Ok(out)
    }
}

impl Part {
    /// Writes the part into `out`: its text, or its elements from the first after
    /// `resume`, each preceded and followed by a `step` (see [`Step`]). True when the part
    /// is written to its end; false when a step stopped it.
    fn scan(
        &self,
        store: &Store,
        resume: Option<&str>,
        now: i64,
        out: &mut Vec<u8>,
        mut step: impl FnMut(Step<'_>, &mut Vec<u8>) -> bool,
    ) -> store::Result<bool> {
        match self {
            Part::Text(text) => {
                out.extend_from_slice(text);
                Ok(true)
            }
            &Part::Items {
                kind,
                render,
                separator,
            } => store.scan_items(kind, resume, now, |item| {
                if !step(Step::Before(separator), out) {
                    return Ok(false);
                }
                let id = item.id.clone();
                render(store, kind, item, out)?;
                Ok(step(Step::After(id), out))
            }),
            &Part::Past { render } => {
                // The resume point is a `history` key, kept as hex.
                let after = resume.and_then(hex_decode);
                store.scan_past(after.as_deref(), |key, kind, past| {
                    if !step(Step::Before(b""), out) {
                        return Ok(false);
                    }
                    render(kind, past, out);
                    Ok(step(Step::After(hex_encode(key)), out))
                })
            }
            &Part::Registrations { render, separator } => {
                store.scan_registrations(resume, |tm, node| {
                    if !step(Step::Before(separator), out) {
                        return Ok(false);
                    }
                    render(&tm, &node, out);
                    Ok(step(Step::After(tm), out))
                })
            }
        }
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn hex_decode(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}
