//! The shape of `sched`'s code, checked:
//!
//! - its modules form layers: the graph of `crate::` imports between its
//!   top-level modules has no circle. Test code (`#[cfg(test)]` blocks and
//!   `tests.rs` files) may reach up (a policy's tests run the simulator),
//!   so it is left out of the graph;
//! - no function, test or not, is longer than `MAX_FN_LINES`.
//!
//! `cargo test -p baton-sched --test shape -- --nocapture` prints the
//! import listing (each module with the modules it imports, lowest layer
//! first) and the longest functions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The longest a function may be, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 80;

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

fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
}

fn graph() -> Graph {
    let root = src();
    let files = sources();
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

/// The text with comments, string and char literals blanked (newlines
/// kept), so braces that remain are code.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[char]| out.extend(s.iter().map(|&x| if x == '\n' { '\n' } else { ' ' }));
    while i < c.len() {
        let rest = &c[i..];
        let end = if rest.starts_with(&['/', '/']) {
            rest.iter().position(|&x| x == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['r', '#']) || rest.starts_with(&['r', '"']) {
            let hashes = rest[1..].iter().take_while(|&&x| x == '#').count();
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let body = 2 + hashes;
            rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len())
        } else if rest[0] == '"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != '"' {
                j += if rest[j] == '\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if rest[0] == '\'' && rest.len() > 2 && (rest[2] == '\'' || rest[1] == '\\') {
            // A char literal ('x' or an escape); otherwise a lifetime.
            rest[1..].iter().skip(1).position(|&x| x == '\'').map_or(1, |p| p + 3)
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    out
}

/// (lines, file, name) of every function with a body.
fn function_lengths() -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for f in sources() {
        let text = code_only(&std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())));
        let lines: Vec<&str> = text.lines().collect();
        for (start, line) in lines.iter().enumerate() {
            let Some(at) = line.find("fn ").filter(|&at| at == 0 || !line.as_bytes()[at - 1].is_ascii_alphanumeric())
            else {
                continue;
            };
            let name: String = line[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let mut depth = 0i64;
            let mut opened = false;
            for (k, l) in lines[start..].iter().enumerate() {
                let from = if k == 0 { at } else { 0 };
                for ch in l[from..].chars() {
                    match ch {
                        '{' => (depth, opened) = (depth + 1, true),
                        '}' => depth -= 1,
                        ';' if !opened && depth == 0 => break,
                        _ => {}
                    }
                }
                if opened && depth == 0 {
                    out.push((k + 1, f.display().to_string(), name.clone()));
                    break;
                }
                if !opened && l[from..].contains(';') {
                    break;
                }
            }
        }
    }
    out.sort_by_key(|l| std::cmp::Reverse(l.0));
    out
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let lengths = function_lengths();
    assert!(lengths.len() > 200, "too few functions found: {}", lengths.len());
    for (n, file, name) in lengths.iter().take(5) {
        println!("{n:>4} lines  {name}  ({file})");
    }
    let long: Vec<_> = lengths.iter().filter(|l| l.0 > MAX_FN_LINES).collect();
    assert!(long.is_empty(), "functions over {MAX_FN_LINES} lines: {long:?}");
}

#[test]
fn the_length_check_sees_through_literals() {
    let text = "fn a() {\n    let s = \"}}}\"; // }\n    let c = '}';\n}\nfn b<'x>(v: &'x u8) -> u8 { *v }\n";
    let code = code_only(text);
    assert_eq!(code.matches('{').count(), code.matches('}').count(), "{code}");
    assert!(code.contains("'x"), "lifetimes stay: {code}");
}
