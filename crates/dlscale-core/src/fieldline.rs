//! Where a field is written: the line of a key in a JSON or TOML document, so that an error found
//! after parsing (a value out of range, an unknown field, an answer of the server naming a field)
//! can still name the line.
//!
//! A field is a path from the document's root: `jobs[2].model.compute_base_s`, `min_batch`. The
//! line is that of the deepest key of the path the document has (the line of `model` when `model`
//! has no `compute_base_s`). The document should be valid (it has been parsed before); on other
//! text the answer means nothing but is still given. JSON keys are compared as written: one
//! written with escapes (`"min\u005fbatch"`) is not found.

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::jobfile::FileFormat;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `jobs[2].model.x` as steps; `None` for a path that is not of that form.
fn steps(path: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Step::Key(key));
        } else if rest.is_empty() {
            return None;
        }
        while let Some(inner) = rest.strip_prefix('[') {
            let (index, after) = inner.split_once(']')?;
            out.push(Step::Index(index.parse().ok()?));
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// The 1-based line of `path` (see the module) in `text`, if the document has its first key.
pub fn field_line(text: &str, format: FileFormat, path: &str) -> Option<u64> {
    let steps = steps(path)?;
    if steps.is_empty() {
        return None;
    }
    match format {
        FileFormat::Json => Scan::new(text).find(&steps),
        FileFormat::Toml => {
            let tree = KeyTree::deserialize(toml::Deserializer::new(text)).ok()?;
            let offset = tree.find(&steps)?;
            Some(line_at(text, offset))
        }
    }
}

/// The line of field `field` of job `job` (0-based) in a job file of either form (`jobs = [...]`,
/// or one job at the top level).
pub fn job_field_line(text: &str, format: FileFormat, job: usize, field: &str) -> Option<u64> {
    let field = field.trim_start_matches('.');
    let listed = if field.is_empty() {
        format!("jobs[{job}]")
    } else {
        format!("jobs[{job}].{field}")
    };
    field_line(text, format, &listed).or_else(|| {
        if job == 0 && !field.is_empty() {
            field_line(text, format, field)
        } else {
            None
        }
    })
}

/// 1-based line of byte `offset`.
fn line_at(text: &str, offset: usize) -> u64 {
    let before = &text.as_bytes()[..offset.min(text.len())];
    before.iter().filter(|&&b| b == b'\n').count() as u64 + 1
}

/// A walk over valid JSON text that follows one path.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    line: u64,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str) -> Self {
        Scan {
            bytes: text.as_bytes(),
            at: 0,
            line: 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn blank(&mut self) {
        while let Some(b) = self.peek() {
            match b {
                b'\n' => self.line += 1,
                b' ' | b'\t' | b'\r' => {}
                _ => return,
            }
            self.at += 1;
        }
    }

    /// At a `"`: the raw bytes of the string, moving past its closing quote.
    fn string(&mut self) -> &'a [u8] {
        self.at += 1;
        let start = self.at;
        while let Some(b) = self.peek() {
            match b {
                b'"' => break,
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
        let end = self.at.min(self.bytes.len());
        self.at = end + 1;
        &self.bytes[start..end]
    }

    /// Moves past one value (iteratively: nesting costs no stack).
    fn skip_value(&mut self) {
        let mut depth = 0usize;
        loop {
            self.blank();
            let Some(b) = self.peek() else { return };
            match b {
                b'"' => {
                    self.string();
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                    self.at += 1;
                }
                b',' | b':' if depth > 0 => self.at += 1,
                b',' => return,
                _ => {
                    // A scalar; at least one byte, so that text that is not JSON still ends.
                    self.at += 1;
                    while self.peek().is_some_and(|b| !b",:]} \t\r\n".contains(&b)) {
                        self.at += 1;
                    }
                }
            }
            if depth == 0 {
                return;
            }
        }
    }

    /// At the start of a value: the line of the deepest key of `steps` in it.
    fn find(&mut self, steps: &[Step]) -> Option<u64> {
        let (first, rest) = steps.split_first()?;
        self.blank();
        match (self.peek()?, first) {
            (b'{', Step::Key(key)) => {
                self.at += 1;
                loop {
                    self.blank();
                    match self.peek()? {
                        b'}' => return None,
                        b',' => self.at += 1,
                        b'"' => {
                            let line = self.line;
                            let name = self.string();
                            self.blank();
                            if self.peek()? != b':' {
                                return None;
                            }
                            self.at += 1;
                            if name == key.as_bytes() {
                                return Some(self.find(rest).unwrap_or(line));
                            }
                            self.skip_value();
                        }
                        _ => return None,
                    }
                }
            }
            (b'[', Step::Index(index)) => {
                self.at += 1;
                let mut k = 0;
                loop {
                    self.blank();
                    match self.peek()? {
                        b']' | b'}' => return None,
                        b',' => {
                            self.at += 1;
                            k += 1;
                        }
                        _ if k == *index => {
                            let line = self.line;
                            return Some(self.find(rest).unwrap_or(line));
                        }
                        _ => self.skip_value(),
                    }
                }
            }
            _ => None,
        }
    }
}

/// The keys of a TOML document with where each is written.
#[derive(Debug, Default)]
enum KeyTree {
    #[default]
    Leaf,
    Table(Vec<(usize, String, KeyTree)>),
    Array(Vec<(usize, KeyTree)>),
}

impl KeyTree {
    /// Byte offset of the deepest key of `steps`.
    fn find(&self, steps: &[Step]) -> Option<usize> {
        let (first, rest) = steps.split_first()?;
        match (self, first) {
            (KeyTree::Table(keys), Step::Key(key)) => {
                let (offset, _, inner) = keys.iter().find(|(_, k, _)| k == key)?;
                Some(inner.find(rest).unwrap_or(*offset))
            }
            (KeyTree::Array(items), Step::Index(i)) => {
                let (offset, inner) = items.get(*i)?;
                Some(inner.find(rest).unwrap_or(*offset))
            }
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for KeyTree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TreeVisitor;
        impl<'de> Visitor<'de> for TreeVisitor {
            type Value = KeyTree;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a TOML value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<KeyTree, E> {
                Ok(KeyTree::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<KeyTree, E> {
                Ok(KeyTree::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<KeyTree, E> {
                Ok(KeyTree::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<KeyTree, E> {
                Ok(KeyTree::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<KeyTree, E> {
                Ok(KeyTree::Leaf)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyTree, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<toml::Spanned<KeyTree>>()? {
                    let offset = item.span().start;
                    items.push((offset, item.into_inner()));
                }
                Ok(KeyTree::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyTree, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<toml::Spanned<String>>()? {
                    let offset = key.span().start;
                    let value = map.next_value()?;
                    keys.push((offset, key.into_inner(), value));
                }
                Ok(KeyTree::Table(keys))
            }
        }
        deserializer.deserialize_any(TreeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_keys_and_indices() {
        assert_eq!(
            steps("jobs[2].model.x"),
            Some(vec![
                Step::Key("jobs"),
                Step::Index(2),
                Step::Key("model"),
                Step::Key("x")
            ])
        );
        assert_eq!(steps("[1].id"), Some(vec![Step::Index(1), Step::Key("id")]));
        assert_eq!(steps("a..b"), None);
        assert_eq!(steps("a[x]"), None);
    }

    #[test]
    fn json_lines_follow_the_path() {
        let text = "{\"jobs\": [\n  {\"id\": \"a\", \"model\": {\"x\": [1, {\"y\": 2}]}},\n  {\"id\": \"b\",\n   \"min_batch\": \"s,}]\\\"\",\n   \"model\": {\n     \"compute_base_s\": 1}}\n]}";
        let line = |path| field_line(text, FileFormat::Json, path);
        assert_eq!(line("jobs"), Some(1));
        assert_eq!(line("jobs[0].id"), Some(2));
        assert_eq!(line("jobs[1].min_batch"), Some(4));
        assert_eq!(line("jobs[1].model.compute_base_s"), Some(6));
        assert_eq!(line("jobs[1].model.nope"), Some(5));
        // A missing key: the line of the deepest one there is.
        assert_eq!(line("jobs[1].nope"), Some(3));
        assert_eq!(line("jobs[2].id"), Some(1));
        assert_eq!(line("nope"), None);
        assert_eq!(job_field_line(text, FileFormat::Json, 1, "id"), Some(3));
        assert_eq!(
            job_field_line("{\"id\": 1,\n\"gpus\": 2}", FileFormat::Json, 0, "gpus"),
            Some(2)
        );
    }

    /// Text that is not JSON: an answer, never a loop or a panic.
    #[test]
    fn broken_json_ends() {
        for text in [
            "[}",
            "[:",
            "{\"a\": [}",
            "{\"a\": [:,",
            "[\"",
            "{\"a",
            "[1 2 3",
        ] {
            for path in ["[0]", "[1]", "a[0]", "a[2].b", "a"] {
                let _ = field_line(text, FileFormat::Json, path);
            }
        }
        assert_eq!(field_line("[}", FileFormat::Json, "[1]"), None);
    }

    #[test]
    fn toml_lines_follow_the_path() {
        let text = "[[jobs]]\nid = \"a\"\n\n[[jobs]]\nid = \"b\"\nmin_batch = 3\n[jobs.model]\ncompute_base_s = 1\n";
        let line = |path| field_line(text, FileFormat::Toml, path);
        assert_eq!(line("jobs[0].id"), Some(2));
        assert_eq!(line("jobs[1].min_batch"), Some(6));
        assert_eq!(line("jobs[1].model"), Some(7));
        assert_eq!(line("jobs[1].model.compute_base_s"), Some(8));
        assert_eq!(line("jobs[1].model.nope"), Some(7));
        assert_eq!(line("jobs[1].nope"), Some(4));
        assert_eq!(line("nope"), None);
        let single = "id = \"a\"\nmodel = { compute_base_s = 1 }\n";
        assert_eq!(
            job_field_line(single, FileFormat::Toml, 0, "model"),
            Some(2)
        );
        assert_eq!(job_field_line(single, FileFormat::Toml, 1, "model"), None);
    }
}
