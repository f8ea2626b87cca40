//! Shortcuts (spec section 4) decoded from targets, and path safety (section 9.2).

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::LlmxError;

/// An operation shortcut (section 4.2), written as a prefix of a target: `+p:src/new.ts`, `@p:docs/api.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpShortcut {
    /// `+`: add or create.
    Add,
    /// `-`: remove or delete.
    Remove,
    /// `~`: modify or change.
    Modify,
    /// `?`: query or check.
    Query,
    /// `!`: force or important.
    Force,
    /// `*`: all or wildcard.
    All,
    /// `@`: reference.
    Reference,
}

impl OpShortcut {
    /// The shortcut written as `c`, if `c` is one.
    pub fn from_char(c: char) -> Option<Self> {
        Some(match c {
            '+' => OpShortcut::Add,
            '-' => OpShortcut::Remove,
            '~' => OpShortcut::Modify,
            '?' => OpShortcut::Query,
            '!' => OpShortcut::Force,
            '*' => OpShortcut::All,
            '@' => OpShortcut::Reference,
            _ => return None,
        })
    }

    /// What the shortcut means, in the words of section 4.2's table (`add`, `remove`, `modify`, `query`, `force`,
    /// `all`, `reference`).
    pub fn meaning(self) -> &'static str {
        match self {
            OpShortcut::Add => "add",
            OpShortcut::Remove => "remove",
            OpShortcut::Modify => "modify",
            OpShortcut::Query => "query",
            OpShortcut::Force => "force",
            OpShortcut::All => "all",
            OpShortcut::Reference => "reference",
        }
    }

    /// The character it is written as.
    pub fn as_char(self) -> char {
        match self {
            OpShortcut::Add => '+',
            OpShortcut::Remove => '-',
            OpShortcut::Modify => '~',
            OpShortcut::Query => '?',
            OpShortcut::Force => '!',
            OpShortcut::All => '*',
            OpShortcut::Reference => '@',
        }
    }
}

/// A line (`#L42`) or line range (`#L10-25`) reference (section 4.1). Lines count from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lines {
    /// `#L42`.
    Line(u32),
    /// `#L10-25`, inclusive; the end is never before the start.
    Range(u32, u32),
}

impl Lines {
    /// Parses what follows `#L`; `None` unless it is canonical (no leading zeros, no line 0, no backwards range), so
    /// that anything else stays part of the path and the target writes back unchanged.
    fn parse(s: &str) -> Option<Lines> {
        fn line(s: &str) -> Option<u32> {
            if s.is_empty() || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        }
        match s.split_once('-') {
            None => line(s).map(Lines::Line),
            Some((a, b)) => {
                let (a, b) = (line(a)?, line(b)?);
                (b >= a).then_some(Lines::Range(a, b))
            }
        }
    }

    /// First line.
    pub fn start(self) -> u32 {
        match self {
            Lines::Line(n) | Lines::Range(n, _) => n,
        }
    }

    /// Last line (inclusive).
    pub fn end(self) -> u32 {
        match self {
            Lines::Line(n) | Lines::Range(_, n) => n,
        }
    }
}

impl fmt::Display for Lines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lines::Line(n) => write!(f, "#L{n}"),
            Lines::Range(a, b) => write!(f, "#L{a}-{b}"),
        }
    }
}

/// A path reference: `p:src/api.ts`, `p:file.ts#L42`, `p:file.ts#L10-25`, `^/src` (section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRef<'a> {
    /// The path as written, without `p:` or the line suffix (may start with `^`).
    pub path: &'a str,
    /// The line or range after `#L`.
    pub lines: Option<Lines>,
}

impl<'a> PathRef<'a> {
    /// Decodes a path reference. The `p:` prefix is optional here (CTX `f` lists plain paths).
    pub fn parse(s: &'a str) -> PathRef<'a> {
        let s = s.strip_prefix("p:").unwrap_or(s);
        if let Some(idx) = s.rfind("#L")
            && let Some(lines) = Lines::parse(&s[idx + 2..])
        {
            return PathRef { path: &s[..idx], lines: Some(lines) };
        }
        PathRef { path: s, lines: None }
    }

    /// The path with each leading `^` segment expanded to `..` (`^/src` is `../src`).
    pub fn expanded(&self) -> String {
        let mut rest = self.path;
        let mut out = String::new();
        loop {
            if let Some(r) = rest.strip_prefix("^/") {
                out.push_str("../");
                rest = r;
            } else if rest == "^" {
                out.push_str("..");
                rest = "";
            } else {
                break;
            }
        }
        out.push_str(rest);
        out
    }
}

/// What a target names once its shortcut prefixes are removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resource<'a> {
    /// A path reference (`p:...` or `^...`).
    Path(PathRef<'a>),
    /// Nothing after the prefixes (`*` alone means everything).
    Empty,
    /// Anything else: a shell command, an agent, a query.
    Other(&'a str),
}

/// An ACT target (`tgt`), kept exactly as written and decoded on demand.
///
/// ```
/// use ldp_llmx::{Lines, OpShortcut, Resource, Target};
/// let t = Target::from("+p:src/auth.ts#L10-25");
/// assert_eq!(t.shortcuts(), vec![OpShortcut::Add]);
/// let Resource::Path(p) = t.resource() else { panic!() };
/// assert_eq!((p.path, p.lines), ("src/auth.ts", Some(Lines::Range(10, 25))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Target(String);

impl Target {
    /// The target text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn split(&self) -> (&str, &str) {
        let n = self.0.chars().take_while(|&c| OpShortcut::from_char(c).is_some()).count();
        // Every shortcut character is ASCII, so n characters are n bytes.
        self.0.split_at(n)
    }

    /// The operation shortcuts the target starts with, in order.
    pub fn shortcuts(&self) -> Vec<OpShortcut> {
        self.split().0.chars().filter_map(OpShortcut::from_char).collect()
    }

    /// What the target names after its shortcuts.
    pub fn resource(&self) -> Resource<'_> {
        let rest = self.split().1;
        if rest.is_empty() {
            Resource::Empty
        } else if rest.starts_with("p:") || rest.starts_with('^') {
            Resource::Path(PathRef::parse(rest))
        } else {
            Resource::Other(rest)
        }
    }

    /// Every shortcut of the target expanded (sections 4.1 and 4.2), in a form that serializes as JSON.
    ///
    /// ```
    /// let e = ldp_llmx::Target::from("+^/src/auth.ts#L10-25").expand();
    /// assert_eq!(
    ///     serde_json::to_value(&e)?,
    ///     serde_json::json!({"text": "+^/src/auth.ts#L10-25", "ops": ["add"], "path": "../src/auth.ts",
    ///                        "lines": {"start": 10, "end": 25}})
    /// );
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn expand(&self) -> ExpandedTarget {
        let ops = self.shortcuts().into_iter().map(OpShortcut::meaning).collect();
        let (path, lines, resource) = match self.resource() {
            Resource::Path(p) => (Some(p.expanded()), p.lines.map(ExpandedLines::from), None),
            Resource::Empty => (None, None, None),
            Resource::Other(o) => (None, None, Some(o.to_owned())),
        };
        ExpandedTarget { text: self.0.clone(), ops, path, lines, resource }
    }

    /// The path reference, if the target is one.
    pub fn path(&self) -> Option<PathRef<'_>> {
        match self.resource() {
            Resource::Path(p) => Some(p),
            _ => None,
        }
    }
}

impl From<String> for Target {
    fn from(s: String) -> Self {
        Target(s)
    }
}

impl From<&str> for Target {
    fn from(s: &str) -> Self {
        Target(s.to_owned())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A target with its shortcuts expanded: what [`Target::expand`] gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpandedTarget {
    /// The target as written.
    pub text: String,
    /// The operation shortcuts' meanings, in order (`+` is `add`, ...).
    pub ops: Vec<&'static str>,
    /// The path, with `p:` removed and `^` expanded to `..`, when the target is a path reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The `#L` line or range of a path reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<ExpandedLines>,
    /// What the target names when it is not a path (a shell command, a query).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

/// A `#L` reference as an inclusive range of lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExpandedLines {
    /// First line, from 1.
    pub start: u32,
    /// Last line, inclusive.
    pub end: u32,
}

impl From<Lines> for ExpandedLines {
    fn from(l: Lines) -> Self {
        ExpandedLines { start: l.start(), end: l.end() }
    }
}

/// A directory that LLMX paths must stay inside (section 9.2).
///
/// The check is lexical: `..`, `^`, absolute paths, drive prefixes, backslash separators and NUL bytes are handled
/// without touching the file system. A symlink inside the root can still point outside; use
/// [`SafeRoot::resolve_existing`] for files that exist, which also checks the canonical path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeRoot {
    root: PathBuf,
}

impl SafeRoot {
    /// A root directory.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SafeRoot { root: root.into() }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves an LLMX path (with or without `p:`, `^`, `#L...`) relative to the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, LlmxError> {
        self.resolve_from("", path)
    }

    /// Resolves an LLMX path relative to `base`, a directory under the root, so that `^` can climb out of `base`
    /// but never out of the root.
    pub fn resolve_from(&self, base: &str, path: &str) -> Result<PathBuf, LlmxError> {
        let escape = || LlmxError::PathEscapesRoot { path: path.to_owned() };
        let mut parts: Vec<&str> = Vec::new();
        let expanded = PathRef::parse(path).expanded();
        for source in [base, expanded.as_str()] {
            if source.contains('\0') {
                return Err(escape());
            }
            // Absolute paths and Windows drive or UNC prefixes never stay under a relative join.
            if source.starts_with(['/', '\\']) || source.split(['/', '\\']).next().is_some_and(|s| s.contains(':')) {
                return Err(escape());
            }
            for seg in source.split(['/', '\\']) {
                match seg {
                    "" | "." => {}
                    ".." => {
                        if parts.pop().is_none() {
                            return Err(escape());
                        }
                    }
                    s => parts.push(s),
                }
            }
        }
        let mut out = self.root.clone();
        for p in parts {
            out.push(p);
        }
        // Belt and braces: the joined path must not contain a component that climbs or re-roots.
        if out.strip_prefix(&self.root).map_or(true, |rel| rel.components().any(|c| !matches!(c, Component::Normal(_))))
        {
            return Err(escape());
        }
        Ok(out)
    }

    /// Like [`SafeRoot::resolve`] for a path that exists, also rejecting symlinks that lead outside the root.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, LlmxError> {
        let lexical = self.resolve(path)?;
        let unresolvable =
            |e: std::io::Error| LlmxError::PathUnresolvable { path: path.to_owned(), reason: e.to_string() };
        let root = self.root.canonicalize().map_err(unresolvable)?;
        let real = lexical.canonicalize().map_err(unresolvable)?;
        if real.starts_with(&root) { Ok(real) } else { Err(LlmxError::PathEscapesRoot { path: path.to_owned() }) }
    }
}
