//! `sched`'s modules form layers: the graph of `crate::` imports between its
//! top-level modules has no circle. Test code (`#[cfg(test)]` blocks and
//! `tests.rs` files) may reach up (a policy's tests run the simulator), so it
//! is left out.
//!
//! `cargo test -p baton-sched --test layers -- --nocapture` prints the
//! listing: each module with the modules it imports, lowest layer first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`glet/serve.rs` -> `glet`).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).expect("under src");
    let first = rel.components().next().expect("a component").as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The production part of a file: up to its first `#[cfg(test)]`.
fn production(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// Every `crate::name` a text mentions, including inside `use crate::{a, b}`.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: `a::{X, Y}, b` gives a and b.
            let (mut depth, mut start) = (0usize, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        start = false;
                        let name = ident(&group[j..]);
                        if !name.is_empty() {
                            out.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn graph() -> Graph {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut g = Graph::new();
    for f in files {
        let module = module_of(&root, &f);
        if module == "lib" {
            continue;
        }
        let deps = g.entry(module.clone()).or_default();
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        deps.extend(imports(production(&text)).into_iter().filter(|d| *d != module));
    }
    g
}

/// Layers by longest path to a leaf, or the modules left on a circle.
fn layers(g: &Graph) -> Result<Vec<Vec<String>>, BTreeSet<String>> {
    let mut placed: BTreeMap<&str, usize> = BTreeMap::new();
    while placed.len() < g.len() {
        let before = placed.len();
        for (m, deps) in g {
            if placed.contains_key(m.as_str()) {
                continue;
            }
            let known = deps.iter().filter(|d| g.contains_key(*d)).map(|d| placed.get(d.as_str()).copied());
            if let Some(level) = known.collect::<Option<Vec<usize>>>() {
                placed.insert(m, level.into_iter().max().map_or(0, |l| l + 1));
            }
        }
        if placed.len() == before {
            return Err(g.keys().filter(|m| !placed.contains_key(m.as_str())).cloned().collect());
        }
    }
    let mut out = vec![Vec::new(); placed.values().max().map_or(0, |l| l + 1)];
    for (m, l) in placed {
        out[l].push(m.to_string());
    }
    Ok(out)
}

#[test]
fn sched_modules_form_layers() {
    let g = graph();
    assert!(g.len() >= 10, "too few modules found: {g:?}");
    for (level, mods) in layers(&g).unwrap_or_else(|c| panic!("import circle among {c:?}: {g:#?}")).iter().enumerate() {
        for m in mods {
            let deps: Vec<&str> = g[m].iter().map(String::as_str).collect();
            println!("{level:>2} {m:<12} <- {}", deps.join(", "));
        }
    }
}

#[test]
fn the_listing_sees_grouped_imports_and_skips_tests() {
    let text = "use crate::a::X;\nuse crate::{b::{Y, Z}, c};\nfn f() { crate::d::g(); }\n#[cfg(test)]\nuse crate::e;";
    let got = imports(production(text));
    assert_eq!(got, ["a", "b", "c", "d"].into_iter().map(String::from).collect());
    let circle: Graph =
        [("x", "y"), ("y", "x")].into_iter().map(|(a, b)| (a.to_string(), BTreeSet::from([b.to_string()]))).collect();
    assert_eq!(layers(&circle), Err(BTreeSet::from(["x".to_string(), "y".to_string()])));
}
