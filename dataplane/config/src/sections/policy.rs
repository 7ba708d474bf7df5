// SPDX-License-Identifier: Apache-2.0
//! `[policy]`: how Kubernetes network policies are applied to this node's pods.

use serde::Serialize;
use toml::Table;

use crate::keywords::keywords;
use crate::validator::{Result, Validator};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Policy {
    pub mode: PolicyMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// What no rule allows is dropped.
    #[default]
    Enforce,
    /// What no rule allows is counted as the policy's and passes: to try a
    /// policy on live traffic before enforcing it.
    Audit,
}

keywords!(PolicyMode, "policy mode", {
    Enforce => "enforce",
    Audit => "audit",
});

pub(crate) fn read(v: &Validator, root: &Table, policy: &mut Policy) -> Result<()> {
    let Some(t) = v.section(root, "policy", &["mode"])? else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "policy.mode")? {
        policy.mode = s.parse().map_err(|r| v.err("policy.mode", r))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::{bad, ok};
    use crate::PolicyMode;

    #[test]
    fn enforce_by_default_audit_on_request() {
        assert_eq!(ok("").policy.mode, PolicyMode::Enforce);
        assert_eq!(ok("[policy]\nmode = \"audit\"").policy.mode, PolicyMode::Audit);
    }

    #[test]
    fn bad_policy_mode() {
        bad("policy.mode = \"log\"", "policy.mode", "expected one of enforce, audit");
    }
}
