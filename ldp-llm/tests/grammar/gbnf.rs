//! A small GBNF interpreter, for tests only: parses the grammar text `ldp_llm::grammar` writes (one rule a line),
//! generates random sentences from it and recognises given texts. Parsing the text (not the converter's own
//! structures) checks the escaping and the syntax the engine will load.

use std::collections::HashMap;

#[derive(Debug, Clone)]
pub enum G {
    Lit(Vec<char>),
    Class { negated: bool, ranges: Vec<(char, char)> },
    Ref(usize),
    Seq(Vec<G>),
    Alt(Vec<G>),
    Rep(Box<G>, usize, Option<usize>),
}

#[derive(Debug)]
pub struct Grammar {
    pub names: Vec<String>,
    pub rules: Vec<G>,
    root: usize,
    height: Vec<usize>,
}

struct P<'a> {
    s: &'a [char],
    i: usize,
    names: &'a HashMap<String, usize>,
}

impl P<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| *c == ' ') {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn hex(&mut self, n: usize) -> Result<char, String> {
        let digits: String = self.s.get(self.i..self.i + n).ok_or("short escape")?.iter().collect();
        self.i += n;
        let v = u32::from_str_radix(&digits, 16).map_err(|e| format!("bad hex {digits}: {e}"))?;
        char::from_u32(v).ok_or_else(|| format!("bad code point {v:x}"))
    }
    fn char_(&mut self) -> Result<char, String> {
        let c = self.peek().ok_or("unexpected end")?;
        self.i += 1;
        if c != '\\' {
            return Ok(c);
        }
        let e = self.peek().ok_or("unexpected end in escape")?;
        self.i += 1;
        Ok(match e {
            'x' => self.hex(2)?,
            'u' => self.hex(4)?,
            'U' => self.hex(8)?,
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            '\\' | '"' | '[' | ']' => e,
            _ => return Err(format!("unknown escape \\{e}")),
        })
    }
    fn alt(&mut self) -> Result<G, String> {
        let mut alts = vec![self.seq()?];
        while self.peek() == Some('|') {
            self.i += 1;
            alts.push(self.seq()?);
        }
        Ok(if alts.len() == 1 { alts.remove(0) } else { G::Alt(alts) })
    }
    fn seq(&mut self) -> Result<G, String> {
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            let Some(c) = self.peek() else { break };
            let atom = match c {
                '|' | ')' => break,
                '"' => {
                    self.i += 1;
                    let mut text = Vec::new();
                    while self.peek() != Some('"') {
                        text.push(self.char_()?);
                    }
                    self.i += 1;
                    G::Lit(text)
                }
                '[' => {
                    self.i += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.i += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != Some(']') {
                        let lo = self.char_()?;
                        let hi = if self.peek() == Some('-') && self.s.get(self.i + 1) != Some(&']') {
                            self.i += 1;
                            self.char_()?
                        } else {
                            lo
                        };
                        ranges.push((lo, hi));
                    }
                    self.i += 1;
                    G::Class { negated, ranges }
                }
                '(' => {
                    self.i += 1;
                    let inner = self.alt()?;
                    self.skip_ws();
                    if self.peek() != Some(')') {
                        return Err(format!("expected ) at {}", self.i));
                    }
                    self.i += 1;
                    inner
                }
                c if c.is_ascii_alphanumeric() || c == '-' => {
                    let start = self.i;
                    while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '-') {
                        self.i += 1;
                    }
                    let name: String = self.s[start..self.i].iter().collect();
                    G::Ref(*self.names.get(&name).ok_or_else(|| format!("undefined rule {name}"))?)
                }
                c => return Err(format!("unexpected {c:?} at {}", self.i)),
            };
            let mut atom = atom;
            loop {
                match self.peek() {
                    Some('*') => atom = G::Rep(Box::new(atom), 0, None),
                    Some('+') => atom = G::Rep(Box::new(atom), 1, None),
                    Some('?') => atom = G::Rep(Box::new(atom), 0, Some(1)),
                    Some('{') => {
                        let end = self.s[self.i..].iter().position(|c| *c == '}').ok_or("unclosed {")? + self.i;
                        let body: String = self.s[self.i + 1..end].iter().collect();
                        let (min, max) = match body.split_once(',') {
                            None => {
                                let n = body.parse().map_err(|e| format!("{body}: {e}"))?;
                                (n, Some(n))
                            }
                            Some((m, "")) => (m.parse().map_err(|e| format!("{body}: {e}"))?, None),
                            Some((m, n)) => (
                                m.parse().map_err(|e| format!("{body}: {e}"))?,
                                Some(n.parse().map_err(|e| format!("{body}: {e}"))?),
                            ),
                        };
                        atom = G::Rep(Box::new(atom), min, max);
                        self.i = end;
                    }
                    _ => break,
                }
                self.i += 1;
            }
            items.push(atom);
        }
        Ok(if items.len() == 1 { items.remove(0) } else { G::Seq(items) })
    }
}

impl Grammar {
    /// Parses a grammar; every referenced rule must be defined once, and `root` must exist.
    pub fn parse(text: &str) -> Result<Grammar, String> {
        let mut names = HashMap::new();
        let mut bodies = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let (name, body) = line.split_once(" ::= ").ok_or_else(|| format!("not a rule: {line}"))?;
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') || name.is_empty() {
                return Err(format!("bad rule name {name:?}"));
            }
            if names.insert(name.to_string(), bodies.len()).is_some() {
                return Err(format!("rule {name} defined twice"));
            }
            bodies.push(body.chars().collect::<Vec<char>>());
        }
        let mut rules = Vec::new();
        for body in &bodies {
            let mut p = P { s: body, i: 0, names: &names };
            let g = p.alt()?;
            if p.i != body.len() {
                return Err(format!("trailing text in {}", body.iter().collect::<String>()));
            }
            rules.push(g);
        }
        let root = *names.get("root").ok_or("no root rule")?;
        let mut ordered = vec![String::new(); names.len()];
        for (n, i) in names {
            ordered[i] = n;
        }
        let mut g = Grammar { names: ordered, height: vec![usize::MAX; rules.len()], rules, root };
        g.heights();
        Ok(g)
    }

    fn h(&self, g: &G) -> usize {
        match g {
            G::Lit(_) | G::Class { .. } => 0,
            G::Ref(r) => self.height[*r],
            G::Seq(xs) => xs.iter().map(|x| self.h(x)).max().unwrap_or(0),
            G::Alt(xs) => xs.iter().map(|x| self.h(x)).min().unwrap_or(usize::MAX),
            G::Rep(x, min, _) => {
                if *min == 0 {
                    0
                } else {
                    self.h(x)
                }
            }
        }
    }

    /// The least derivation depth of each rule (`usize::MAX` for a rule that derives nothing finite).
    fn heights(&mut self) {
        loop {
            let mut changed = false;
            for r in 0..self.rules.len() {
                let h = self.h(&self.rules[r]).saturating_add(1);
                if h < self.height[r] {
                    self.height[r] = h;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Rules that derive no finite sentence.
    pub fn unproductive(&self) -> Vec<&str> {
        (0..self.rules.len()).filter(|r| self.height[*r] == usize::MAX).map(|r| self.names[r].as_str()).collect()
    }

    /// A random sentence; past `budget` nested rules it takes the shortest way out.
    pub fn generate(&self, rng: &mut Rng, budget: usize) -> String {
        let mut out = String::new();
        self.gen_expr(&self.rules[self.root], rng, 0, budget, &mut out);
        out
    }

    fn gen_expr(&self, g: &G, rng: &mut Rng, depth: usize, budget: usize, out: &mut String) {
        let deep = depth > budget;
        match g {
            G::Lit(t) => out.extend(t),
            G::Class { negated, ranges } => {
                let fits: Vec<char> = CANDIDATES
                    .iter()
                    .copied()
                    .filter(|c| ranges.iter().any(|(lo, hi)| lo <= c && c <= hi) != *negated)
                    .collect();
                assert!(!fits.is_empty(), "no candidate character for a class");
                out.push(fits[rng.below(fits.len())]);
            }
            G::Ref(r) => self.gen_expr(&self.rules[*r], rng, depth + 1, budget, out),
            G::Seq(xs) => xs.iter().for_each(|x| self.gen_expr(x, rng, depth, budget, out)),
            G::Alt(xs) => {
                let x = if deep {
                    xs.iter().min_by_key(|x| self.h(x)).expect("an alternative")
                } else {
                    let ok: Vec<&G> = xs.iter().filter(|x| self.h(x) != usize::MAX).collect();
                    ok[rng.below(ok.len())]
                };
                self.gen_expr(x, rng, depth, budget, out);
            }
            G::Rep(x, min, max) => {
                let n = if deep || self.h(x) == usize::MAX {
                    *min
                } else {
                    let hi = max.unwrap_or(min + 4).min(min + 4);
                    min + rng.below(hi - min + 1)
                };
                for _ in 0..n {
                    self.gen_expr(x, rng, depth, budget, out);
                }
            }
        }
    }

    /// Whether the grammar derives exactly `text`.
    pub fn accepts(&self, text: &str) -> bool {
        let s: Vec<char> = text.chars().collect();
        let mut memo = HashMap::new();
        self.ends(&self.rules[self.root], &s, 0, &mut memo).contains(&s.len())
    }

    fn ends(&self, g: &G, s: &[char], pos: usize, memo: &mut HashMap<(usize, usize), Vec<usize>>) -> Vec<usize> {
        let mut out = match g {
            G::Lit(t) => {
                if s.get(pos..pos + t.len()) == Some(t.as_slice()) {
                    vec![pos + t.len()]
                } else {
                    vec![]
                }
            }
            G::Class { negated, ranges } => match s.get(pos) {
                Some(c) if ranges.iter().any(|(lo, hi)| lo <= c && c <= hi) != *negated => vec![pos + 1],
                _ => vec![],
            },
            G::Ref(r) => {
                if let Some(v) = memo.get(&(*r, pos)) {
                    return v.clone();
                }
                let v = self.ends(&self.rules[*r], s, pos, memo);
                memo.insert((*r, pos), v.clone());
                v
            }
            G::Seq(xs) => {
                let mut cur = vec![pos];
                for x in xs {
                    let mut next = Vec::new();
                    for p in cur {
                        next.extend(self.ends(x, s, p, memo));
                    }
                    next.sort_unstable();
                    next.dedup();
                    cur = next;
                }
                cur
            }
            G::Alt(xs) => xs.iter().flat_map(|x| self.ends(x, s, pos, memo)).collect(),
            G::Rep(x, min, max) => {
                let mut all = Vec::new();
                let mut cur = vec![pos];
                let mut k = 0;
                loop {
                    if k >= *min {
                        all.extend(cur.iter().copied());
                    }
                    if max.is_some_and(|m| k >= m) || cur.is_empty() || k > s.len() + min {
                        break;
                    }
                    let mut next = Vec::new();
                    for p in &cur {
                        next.extend(self.ends(x, s, *p, memo));
                    }
                    next.sort_unstable();
                    next.dedup();
                    cur = next;
                    k += 1;
                }
                all
            }
        };
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The characters a class may produce: ASCII (controls included, to check they are excluded), and a few beyond.
static CANDIDATES: &[char] = &[
    '\u{0}', '\u{1}', '\t', '\n', '\r', '\u{1f}', ' ', '!', '"', '#', '$', '%', '&', '\'', '(', ')', '*', '+', ',',
    '-', '.', '/', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', ':', ';', '<', '=', '>', '?', '@', 'A', 'B', 'C',
    'D', 'E', 'F', 'Z', '[', '\\', ']', '^', '_', '`', 'a', 'b', 'c', 'd', 'e', 'f', 'n', 'r', 't', 'u', 'z', '{', '|',
    '}', '~', '\u{7f}', 'é', 'ß', '日', '😀', '\u{2028}',
];

/// A small deterministic generator (xorshift), seeded by proptest.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}
