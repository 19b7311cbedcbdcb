//! Scenarios built in code, for tests and harnesses: start from a TOML
//! text, then change it key by key. Every edit must apply — a path that
//! does not name what the edit expects panics, naming the path — so a test
//! cannot silently keep testing the unchanged file (as a string replace
//! whose target text moved would).
//!
//! ```
//! use baton_sched::scenario::builder::ScenarioText;
//! let base = ScenarioText::from_toml("name = \"t\"\n[cluster]\ngpus = 1\n[[models]]\nname = \"m\"\nalpha_ms = 1.0\nbeta_ms = 2.0\nslo_ms = 20.0\n");
//! assert!(base.parse().is_ok());
//! let bad = base.set("cluster.gpus", 0);
//! assert!(bad.parse().unwrap_err().to_string().contains("cluster.gpus"));
//! ```
//!
//! Paths are dotted keys with `[i]` for an element of an array of tables:
//! `cluster.gpus`, `models[0].apps[1].exec_ms`.

use std::rc::Rc;

use toml::{Table, Value};

use super::{Scenario, ScenarioError};

/// Returns the text of a file the scenario names (the caller does the I/O).
pub type Reader = Rc<dyn Fn(&str) -> Result<String, String>>;

/// A scenario file under construction.
#[derive(Clone)]
pub struct ScenarioText {
    doc: Table,
    read: Option<Reader>,
}

impl std::fmt::Debug for ScenarioText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// One step of a path: a key, or a key and an index into its array.
fn steps(path: &str) -> Vec<(&str, Option<usize>)> {
    path.split('.')
        .map(|step| match step.split_once('[') {
            Some((key, rest)) => {
                let index = rest.strip_suffix(']').and_then(|i| i.parse().ok());
                (key, Some(index.unwrap_or_else(|| panic!("`{path}`: bad index in `{step}`"))))
            }
            None => (step, None),
        })
        .collect()
}

impl ScenarioText {
    /// Starts from a TOML text (panics if it is not TOML: a test's own bug).
    pub fn from_toml(text: &str) -> Self {
        Self { doc: text.parse().unwrap_or_else(|e| panic!("not TOML: {e}")), read: None }
    }

    /// Files the scenario names (`partition_profiles`) are read with `read`.
    #[must_use]
    pub fn reading(mut self, read: Reader) -> Self {
        self.read = Some(read);
        self
    }

    /// The table that holds the last key of `path`, and that key.
    fn parent<'a, 'p>(&'a mut self, path: &'p str) -> (&'a mut Table, &'p str) {
        let mut steps = steps(path);
        let (last, index) = steps.pop().expect("split yields one step");
        assert!(index.is_none(), "`{path}`: the last step names a key, not an element");
        let mut table = &mut self.doc;
        for (key, index) in steps {
            let value = table.get_mut(key).unwrap_or_else(|| panic!("`{path}`: no `{key}`"));
            let value = match index {
                Some(i) => match value {
                    Value::Array(a) => a.get_mut(i).unwrap_or_else(|| panic!("`{path}`: no element {i} of `{key}`")),
                    _ => panic!("`{path}`: `{key}` is not an array"),
                },
                None => value,
            };
            table = value.as_table_mut().unwrap_or_else(|| panic!("`{path}`: `{key}` is not a table"));
        }
        (table, last)
    }

    /// Changes the value of a key that is there.
    #[must_use]
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Self {
        let (table, key) = self.parent(path);
        let slot = table.get_mut(key).unwrap_or_else(|| panic!("`{path}`: no such key to set"));
        *slot = value.into();
        self
    }

    /// Adds a key that is not there yet (in a table that is).
    #[must_use]
    pub fn add(mut self, path: &str, value: impl Into<Value>) -> Self {
        let (table, key) = self.parent(path);
        let old = table.insert(key.to_string(), value.into());
        assert!(old.is_none(), "`{path}`: already there; use `set`");
        self
    }

    /// Removes a key that is there.
    #[must_use]
    pub fn remove(mut self, path: &str) -> Self {
        let (table, key) = self.parent(path);
        table.remove(key).unwrap_or_else(|| panic!("`{path}`: no such key to remove"));
        self
    }

    /// Appends a table to the array of tables at `path` (`models`,
    /// `models[0].apps`), creating the array if the key is not there.
    #[must_use]
    pub fn push(mut self, path: &str, entry: &str) -> Self {
        let entry: Table = entry.parse().unwrap_or_else(|e| panic!("`{path}`: entry is not TOML: {e}"));
        let (table, key) = self.parent(path);
        match table.entry(key.to_string()).or_insert_with(|| Value::Array(Vec::new())) {
            Value::Array(a) => a.push(Value::Table(entry)),
            _ => panic!("`{path}`: not an array of tables"),
        }
        self
    }

    /// The scenario file's text.
    pub fn text(&self) -> String {
        toml::to_string(&self.doc).expect("a TOML table serializes")
    }

    /// Parses the text as a scenario file (naming no other file unless a
    /// reader was given).
    pub fn parse(&self) -> Result<Scenario, ScenarioError> {
        match &self.read {
            Some(read) => Scenario::parse_with(&self.text(), read.as_ref()),
            None => Scenario::parse(&self.text()),
        }
    }

    /// Parses it, panicking with the error (for tests of good files).
    pub fn scenario(&self) -> Scenario {
        self.parse().unwrap_or_else(|e| panic!("scenario does not parse: {e}\n{}", self.text()))
    }

    /// Asserts the scenario is refused with an error that names `key`;
    /// returns the error's text.
    pub fn rejected_at(&self, key: &str) -> String {
        let e = self.parse().expect_err("must be rejected").to_string();
        assert!(e.contains(key), "error `{e}` does not name `{key}`\n{}", self.text());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str =
        "name = \"t\"\n[cluster]\ngpus = 2\n[[models]]\nname = \"m\"\nalpha_ms = 1.0\nbeta_ms = 2.0\nslo_ms = 20.0\n";

    #[test]
    fn edits_apply_where_they_say() {
        let s = ScenarioText::from_toml(BASE)
            .set("cluster.gpus", 5)
            .add("models[0].weight", 2.0)
            .push("models", "name = \"n\"\nalpha_ms = 1.0\nbeta_ms = 1.0\nslo_ms = 9.0")
            .scenario();
        assert_eq!(s.cluster.backends, 5);
        assert_eq!(s.models[0].weight, 2.0);
        assert_eq!(s.models[1].spec.name, "n");
        ScenarioText::from_toml(BASE).remove("models[0].beta_ms").rejected_at("models[0].alpha_ms");
    }

    #[test]
    #[should_panic(expected = "no such key to set")]
    fn an_edit_that_misses_fails_the_test() {
        let _ = ScenarioText::from_toml(BASE).set("cluster.gpu", 3);
    }

    #[test]
    #[should_panic(expected = "no element 3")]
    fn an_index_past_the_end_fails_the_test() {
        let _ = ScenarioText::from_toml(BASE).set("models[3].slo_ms", 3.0);
    }

    #[test]
    #[should_panic(expected = "already there")]
    fn adding_a_key_that_is_there_fails_the_test() {
        let _ = ScenarioText::from_toml(BASE).add("cluster.gpus", 3);
    }
}
