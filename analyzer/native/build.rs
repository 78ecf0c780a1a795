//! Embeds the git commit sqlwa is built from, for `sqlwa --version`: a wheel or an sdist
//! has no .git to ask at run time. In order: $SQLWA_GIT_COMMIT, `git rev-parse HEAD` of
//! the checkout, the `GIT_COMMIT` file scripts/release writes into the sdist, "unknown".
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=SQLWA_GIT_COMMIT");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let file = Path::new(&manifest_dir).join("GIT_COMMIT");
    println!("cargo:rerun-if-changed={}", file.display());
    // A new commit (HEAD moves, or the branch it names does) rebuilds this crate only. A
    // path that does not exist would rerun this script on every build: only existing ones.
    let git_path = |name: &str| git(&["rev-parse", "--path-format=absolute", "--git-path", name]);
    let mut watched = vec![git_path("HEAD")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend([git_path(&branch), git_path("packed-refs")]);
    }
    for path in watched
        .into_iter()
        .flatten()
        .filter(|p| Path::new(p).exists())
    {
        println!("cargo:rerun-if-changed={path}");
    }
    let commit = std::env::var("SQLWA_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "HEAD"]))
        .or_else(|| {
            std::fs::read_to_string(&file)
                .ok()
                .map(|c| c.trim().to_string())
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SQLWA_GIT_COMMIT={commit}");
}
