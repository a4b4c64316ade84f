//! `mew agents`: list the roles the node would serve, where each comes from, and what is wrong.

use std::io::Write;

use super::Context;
use crate::node::load_catalog;
use crate::roles::catalog::render_agents;

/// Loads the role catalog as the node would and prints it (JSON with `--json`).
pub(crate) fn agents(context: &Context, out: &mut dyn Write) -> anyhow::Result<()> {
    let catalog = load_catalog(&context.config);
    out.write_all(render_agents(&catalog, context.json).as_bytes())?;
    Ok(())
}
