//! The build-time facts of the papers crate: the commit it is built from, and the papers
//! with code (declared from their directories).

#[path = "build/commit.rs"]
mod commit;
#[path = "build/papers.rs"]
mod papers;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    commit::record();
    papers::declare()
}
