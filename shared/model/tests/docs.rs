//! Keeps the documentation honest: README.md and docs/*.md link only to files and
//! headings that exist, the README links every page of docs/ and stays short, shows the
//! two commands, and names only scripts and packages that exist.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

const README_MAX_LINES: usize = 400;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A page of documentation: its path from the repository's root, and its text.
struct Page {
    path: String,
    text: String,
}

impl Page {
    fn read(path: &str) -> Page {
        let text = fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        Page { path: path.to_string(), text }
    }

    /// Where a link of this page leads, as a path from the repository's root.
    fn resolve(&self, target: &str) -> PathBuf {
        let mut path = PathBuf::new();
        let from = Path::new(&self.path).parent().unwrap_or(Path::new(""));
        for part in from.join(target).components() {
            match part {
                Component::ParentDir => {
                    path.pop();
                }
                Component::Normal(name) => path.push(name),
                _ => {}
            }
        }
        path
    }

    /// Every line with its 1-based number and whether it lies in a fenced code block
    /// (the fences themselves count as inside).
    fn lines(&self) -> Vec<(usize, &str, bool)> {
        let mut fence: Option<&str> = None;
        let mut out = Vec::new();
        for (i, line) in self.text.lines().enumerate() {
            let trimmed = line.trim_start();
            let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
            match (fence, marker) {
                (None, Some(m)) => {
                    fence = Some(m);
                    out.push((i + 1, line, true));
                }
                (Some(open), Some(m)) if open == m && trimmed.trim_end() == m => {
                    fence = None;
                    out.push((i + 1, line, true));
                }
                _ => out.push((i + 1, line, fence.is_some())),
            }
        }
        out
    }

    /// The fenced code blocks: their info string and their lines.
    fn code_blocks(&self) -> Vec<(String, Vec<&str>)> {
        let mut blocks: Vec<(String, Vec<&str>)> = Vec::new();
        let mut open = false;
        for (_, line, fenced) in self.lines() {
            let trimmed = line.trim();
            let is_fence = fenced && (trimmed.starts_with("```") || trimmed.starts_with("~~~"));
            if is_fence && !open {
                blocks.push((trimmed.trim_start_matches(['`', '~']).trim().to_string(), Vec::new()));
                open = true;
            } else if is_fence && open && trimmed.trim_matches(['`', '~']).is_empty() {
                open = false;
            } else if open {
                blocks.last_mut().expect("a block is open").1.push(line);
            }
        }
        blocks
    }

    /// The anchors of its headings, as GitHub makes them.
    fn anchors(&self) -> BTreeSet<String> {
        let mut anchors = BTreeSet::new();
        for (_, line, fenced) in self.lines() {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
                continue;
            }
            let base = slug(line[hashes..].trim());
            let mut anchor = base.clone();
            let mut n = 0;
            while anchors.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            anchors.insert(anchor);
        }
        anchors
    }
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, and every other
/// character that is not a letter, a digit, `-` or `_` left out.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// README.md and every Markdown page of docs/.
fn pages() -> Vec<Page> {
    let mut paths = vec!["README.md".to_string()];
    paths.extend(docs_files().into_iter().filter(|p| p.ends_with(".md")));
    paths.iter().map(|p| Page::read(p)).collect()
}

/// Every file in docs/, as a path from the repository's root.
fn docs_files() -> Vec<String> {
    let mut files: Vec<String> = fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable docs/ entry"))
        .filter(|e| e.path().is_file())
        .map(|e| format!("docs/{}", e.file_name().to_string_lossy()))
        .collect();
    files.sort();
    files
}

/// The line without its inline code spans, so that text in backticks is not read as
/// Markdown.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        } else {
            out.push_str(&" ".repeat(part.len() + 2));
        }
    }
    out
}

/// The targets of the inline links and images of a line outside code.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        if let Some(target) = after[..end].split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_string());
        }
        rest = &after[end..];
    }
    targets
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// The problems with one relative link of `page`, if any.
fn check_link(page: &Page, target: &str) -> Option<String> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() { PathBuf::from(&page.path) } else { page.resolve(path) };
    if !root().join(&file).exists() {
        return Some(format!("link `{target}`: there is no file {}", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|e| e != "md") {
        return Some(format!("link `{target}`: an anchor into a file that is not Markdown"));
    }
    let linked = Page::read(&file.to_string_lossy());
    if linked.anchors().contains(anchor) {
        None
    } else {
        Some(format!("link `{target}`: no heading of {} has the anchor `#{anchor}`", file.display()))
    }
}

fn fail_on(problems: Vec<String>, what: &str) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[test]
fn every_relative_link_points_to_a_file_and_heading_that_exist() {
    let mut problems = Vec::new();
    for page in pages() {
        for (number, line, fenced) in page.lines() {
            if fenced {
                continue;
            }
            for target in link_targets(line).iter().filter(|t| !is_external(t)) {
                if let Some(problem) = check_link(&page, target) {
                    problems.push(format!("{}:{number}: {problem}", page.path));
                }
            }
        }
    }
    fail_on(problems, "broken links");
}

#[test]
fn the_readme_links_every_page_of_docs() {
    let readme = Page::read("README.md");
    let linked: BTreeSet<PathBuf> = readme
        .lines()
        .into_iter()
        .filter(|(_, _, fenced)| !fenced)
        .flat_map(|(_, line, _)| link_targets(line))
        .filter(|t| !is_external(t) && !t.starts_with('#'))
        .map(|t| readme.resolve(t.split('#').next().unwrap_or_default()))
        .collect();
    let problems: Vec<String> = docs_files()
        .into_iter()
        .filter(|f| !linked.contains(Path::new(f)))
        .map(|f| format!("README.md: no link to {f}"))
        .collect();
    fail_on(problems, "pages of docs/ the README does not link");
}

#[test]
fn the_readme_is_short() {
    let lines = Page::read("README.md").text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md:{lines}: the README has {lines} lines, more than {README_MAX_LINES}: move reference to docs/"
    );
}

#[test]
fn the_readme_shows_the_two_commands() {
    let readme = Page::read("README.md");
    let blocks = readme.code_blocks();
    for command in ["cargo run --release", "scripts/test.sh"] {
        assert!(
            blocks.iter().any(|(info, lines)| info == "sh" && lines.iter().any(|l| l.trim() == command)),
            "README.md: no ```sh block has the line `{command}`"
        );
    }
}

#[test]
fn every_script_named_exists() {
    let mut problems = Vec::new();
    for page in pages() {
        for (number, line, _) in page.lines() {
            for name in script_names(line) {
                if !root().join("scripts").join(&name).exists() {
                    problems.push(format!("{}:{number}: `scripts/{name}` does not exist", page.path));
                }
            }
        }
    }
    fail_on(problems, "scripts that do not exist");
}

/// The names after each `scripts/` of a line that begins a path.
fn script_names(line: &str) -> Vec<String> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let mut names = Vec::new();
    for (at, _) in line.match_indices("scripts/") {
        if line[..at].chars().next_back().is_some_and(path_char) {
            continue;
        }
        let name: String = line[at + "scripts/".len()..].chars().take_while(|&c| path_char(c)).collect();
        let name = name.trim_end_matches(['.', '/']);
        if !name.is_empty() {
            names.push(name.to_string());
        }
    }
    names
}

#[test]
fn every_package_named_in_a_cargo_command_exists() {
    let packages = packages();
    let mut problems = Vec::new();
    for page in pages() {
        for (number, line, _) in page.lines() {
            for name in cargo_packages(line) {
                if !packages.contains(&name) {
                    problems.push(format!("{}:{number}: `-p {name}`: no package of that name", page.path));
                }
            }
        }
    }
    fail_on(problems, "cargo commands naming packages that do not exist");
}

/// The names given to `-p` after `cargo` on a line.
fn cargo_packages(line: &str) -> Vec<String> {
    let Some(at) = line.find("cargo ") else {
        return Vec::new();
    };
    let words: Vec<&str> = line[at..].split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-p" || w[0] == "--package")
        .map(|w| w[1].trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).to_string())
        .collect()
}

/// The names of the packages under services/ and shared/.
fn packages() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in ["services", "shared"] {
        for entry in fs::read_dir(root().join(dir)).unwrap_or_else(|e| panic!("cannot read {dir}/: {e}")) {
            let manifest = entry.expect("a readable entry").path().join("Cargo.toml");
            if let Ok(text) = fs::read_to_string(&manifest) {
                names.extend(package_name(&text));
            }
        }
    }
    names
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if let (true, Some(value)) = (in_package, line.strip_prefix("name")) {
            return Some(value.trim_start().strip_prefix('=')?.trim().trim_matches('"').to_string());
        }
    }
    None
}

#[test]
fn the_helpers_read_markdown_as_github_does() {
    assert_eq!(slug("The cluster: `docker compose up`"), "the-cluster-docker-compose-up");
    assert_eq!(slug("2026-12-05 — The probe's view"), "2026-12-05--the-probes-view");
    assert_eq!(slug("What \"exactly-once\" means_here"), "what-exactly-once-means_here");
    assert_eq!(link_targets("see [a](docs/a.md#b), ![c](d.png \"t\") and `[e](f.md)`"), ["docs/a.md#b", "d.png"]);
    let page = Page { path: "docs/a.md".into(), text: String::new() };
    assert_eq!(page.resolve("../README.md#x"), Path::new("README.md#x"));
    assert_eq!(page.resolve("./b.md"), Path::new("docs/b.md"));
    assert_eq!(script_names("run scripts/test.sh. Or deploy/scripts/x, scripts/, scripts/lib/"), ["test.sh", "lib"]);
    assert_eq!(cargo_packages("`cargo run --release -p vigil -- generate` and -p other"), ["vigil", "other"]);
    assert_eq!(
        package_name("[package]\nname = \"vigil-model\"\n[dependencies]\nname = \"x\""),
        Some("vigil-model".into())
    );
}
