// SPDX-License-Identifier: Apache-2.0
//! Attaching the host programs and the translator to devices, adopting what
//! a previous agent pinned, and removing what is no longer wanted (`detach`,
//! which removes everything, is in detach.rs).
//!
//! tcx, netkit and XDP links are pinned as
//! `<pin_dir>/links/<device>-<direction>`. A pinned link keeps its program
//! attached with no process holding it, which is what keeps traffic flowing
//! while the agent is down. On kernels before 6.6 (or `attach.mode =
//! "clsact"`) tc programs are cls_bpf filters at a fixed priority and handle
//! instead; those persist in the qdisc by themselves.
//!
//! XDP goes on an uplink in the driver's native mode only, in front of its
//! tc programs, which stay: a driver without native XDP keeps the device on
//! tc alone, and says why (generic XDP would be slower than tc).

use std::{
    collections::BTreeMap,
    fs,
    io::ErrorKind,
    os::fd::{AsFd, AsRawFd},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use aya::{
    programs::{
        links::{FdLink, LinkOrder, PinnedLink},
        tc::{self, NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle},
        xdp::XdpLink,
        Link, Program, ProgramInfo, TcAttachType, Xdp, XdpMode,
    },
    util::KernelVersion,
    Ebpf,
};
use serde::{Deserialize, Serialize};
use v6node_config::AttachMode;

use crate::{bpf, files, linkinfo, netdev, paths::Paths};

/// cls_bpf priority and handle v6node's filters use in clsact mode; fixed so
/// that a new agent finds and replaces the filters of the previous one. The
/// translator's filter comes one priority later, after the host program.
const CLSACT_PRIORITY: u16 = 0x7636;
const CLSACT_HANDLE: u32 = 0x7636;

/// Where on a device a program goes, and so which program: a link pin's
/// suffix, `direction` in the state file and `status`. (Counters have
/// directions of their own, `v6node_abi::Direction`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachPoint {
    /// The host program at tc ingress.
    Ingress,
    /// The host program at tc egress.
    Egress,
    /// The translator, at tc ingress after the host program.
    Nat64,
    /// A pod's outgoing traffic: netkit peer link, or tcx ingress of the
    /// host-side veth.
    FromPod,
    /// Traffic into a pod: netkit primary link, or tcx egress of the veth.
    ToPod,
    /// An uplink's native XDP program, before its tc ingress.
    Xdp,
}

impl AttachPoint {
    /// Where the host programs go on each device in attach.devices.
    pub const HOST: [AttachPoint; 2] = [AttachPoint::Ingress, AttachPoint::Egress];
    /// Where the pod programs go on the host side of each pod's pair.
    pub const POD: [AttachPoint; 2] = [AttachPoint::FromPod, AttachPoint::ToPod];
    pub const ALL: [AttachPoint; 6] = [
        AttachPoint::Ingress,
        AttachPoint::Egress,
        AttachPoint::Nat64,
        AttachPoint::FromPod,
        AttachPoint::ToPod,
        AttachPoint::Xdp,
    ];

    /// Whether the program runs at tc (a tcx link, a clsact filter or a
    /// netkit link): all but XDP.
    pub fn at_tc(self) -> bool {
        self != AttachPoint::Xdp
    }

    /// The tc side a program runs at; XDP's, which has none, is named as
    /// ingress, where its frames go next.
    fn tc(self) -> TcAttachType {
        match self {
            AttachPoint::Ingress | AttachPoint::Nat64 | AttachPoint::FromPod | AttachPoint::Xdp => TcAttachType::Ingress,
            AttachPoint::Egress | AttachPoint::ToPod => TcAttachType::Egress,
        }
    }

    /// netkit's attach points, both named through the primary device.
    fn netkit_attach_type(self) -> u32 {
        match self {
            AttachPoint::FromPod => linkinfo::BPF_NETKIT_PEER,
            _ => linkinfo::BPF_NETKIT_PRIMARY,
        }
    }

    fn object(self) -> &'static bpf::Object {
        match self {
            AttachPoint::Ingress | AttachPoint::Egress => &bpf::HOST_OBJECT,
            AttachPoint::Nat64 => &bpf::NAT64_OBJECT,
            AttachPoint::FromPod | AttachPoint::ToPod => &bpf::POD_OBJECT,
            AttachPoint::Xdp => &bpf::XDP_OBJECT,
        }
    }

    pub fn program(self) -> &'static str {
        match self {
            AttachPoint::Ingress => bpf::HOST_INGRESS,
            AttachPoint::Egress => bpf::HOST_EGRESS,
            AttachPoint::Nat64 => bpf::NAT64,
            AttachPoint::FromPod => bpf::FROM_POD,
            AttachPoint::ToPod => bpf::TO_POD,
            AttachPoint::Xdp => bpf::XDP_UPLINK,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AttachPoint::Ingress => "ingress",
            AttachPoint::Egress => "egress",
            AttachPoint::Nat64 => "nat64",
            AttachPoint::FromPod => "from_pod",
            AttachPoint::ToPod => "to_pod",
            AttachPoint::Xdp => "xdp",
        }
    }

    fn parse(name: &str) -> Option<AttachPoint> {
        AttachPoint::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The host program filters first, so a denied source never reaches the
    /// translator (or anything other agents attach); the translator goes
    /// last, after whatever else inspects the untranslated packet.
    fn order(self) -> LinkOrder {
        match self {
            AttachPoint::Nat64 => LinkOrder::last(),
            _ => LinkOrder::first(),
        }
    }

    fn clsact_priority(self) -> u16 {
        match self {
            AttachPoint::Nat64 => CLSACT_PRIORITY + 1,
            _ => CLSACT_PRIORITY,
        }
    }
}

/// Where one attachment goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub ifindex: u32,
    /// The device is a netkit primary: programs go on netkit links.
    pub netkit: bool,
    /// A device may decline it (native XDP under `attach.xdp = "auto"`):
    /// the refusal is then a note in `status`, not an error.
    pub optional: bool,
}

impl Target {
    /// An attachment the device must take.
    pub fn required(ifindex: u32, netkit: bool) -> Target {
        Target { ifindex, netkit, optional: false }
    }
}

/// What should be attached: (device, direction) -> target.
pub type Wanted = BTreeMap<(String, AttachPoint), Target>;

/// How programs go on the node's devices, one choice for the whole node:
/// tcx links (Linux 6.6+) or cls_bpf filters in a clsact qdisc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TcMode {
    Tcx,
    Clsact,
}

impl TcMode {
    pub fn resolve(configured: AttachMode) -> TcMode {
        match configured {
            AttachMode::Tcx => TcMode::Tcx,
            AttachMode::Clsact => TcMode::Clsact,
            AttachMode::Auto => match KernelVersion::current() {
                Ok(version) if version >= KernelVersion::new(6, 6, 0) => TcMode::Tcx,
                _ => TcMode::Clsact,
            },
        }
    }
}

/// What one attachment is held by: the node's tc mode, or, on a netkit
/// pod device, a netkit link whatever that mode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    Tcx,
    Clsact,
    Netkit,
    /// An XDP link in the driver's native mode.
    Xdp,
}

impl From<TcMode> for Hook {
    fn from(mode: TcMode) -> Hook {
        match mode {
            TcMode::Tcx => Hook::Tcx,
            TcMode::Clsact => Hook::Clsact,
        }
    }
}

/// What reconciling one device and direction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachAction {
    /// A new link or filter.
    Attached,
    /// A pinned link from an earlier agent, running the same program.
    Adopted,
    /// An existing link or filter, given this agent's build of the program.
    Replaced,
    /// Already handled by this agent.
    Unchanged,
    /// Refused by a device that may refuse it (`Target::optional`); the
    /// reason is the attachment's note.
    Declined,
    Failed,
}

impl std::fmt::Display for AttachAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttachAction::Attached => "attached",
            AttachAction::Adopted => "adopted",
            AttachAction::Replaced => "replaced",
            AttachAction::Unchanged => "unchanged",
            AttachAction::Declined => "declined",
            AttachAction::Failed => "failed",
        })
    }
}

/// An attach step's action and the ids it left in force.
struct Outcome {
    action: AttachAction,
    program_id: Option<u32>,
    link_id: Option<u32>,
}

/// What reconciling one device and direction did, as `status` reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Attachment {
    pub device: String,
    pub ifindex: u32,
    pub direction: AttachPoint,
    pub mode: Hook,
    pub action: AttachAction,
    pub program_id: Option<u32>,
    pub link_id: Option<u32>,
    pub error: Option<String>,
    /// Why a device declined (AttachAction::Declined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Attachment {
    /// The uplinks' XDP program, running in the driver.
    pub fn runs_native_xdp(&self) -> bool {
        self.direction == AttachPoint::Xdp && self.error.is_none() && self.action != AttachAction::Declined
    }
}

fn link_pin(paths: &Paths, device: &str, direction: AttachPoint) -> PathBuf {
    paths.links_dir().join(format!("{device}-{}", direction.name()))
}

/// Splits a link pin's file name back into device and direction.
fn parse_link_pin(name: &str) -> Option<(String, AttachPoint)> {
    let (device, direction) = name.rsplit_once('-')?;
    Some((device.to_owned(), AttachPoint::parse(direction)?))
}

pub fn program_pin(paths: &Paths, device: &str, direction: AttachPoint) -> PathBuf {
    paths.programs_dir().join(format!("{device}-{}", direction.name()))
}

/// The tag of the program a link runs, read from the program pinned beside
/// the link (no CAP_SYS_ADMIN needed, unlike a lookup by id).
fn pinned_program_tag(paths: &Paths, device: &str, direction: AttachPoint, program_id: u32) -> Option<u64> {
    let info = ProgramInfo::from_pin(program_pin(paths, device, direction)).ok()?;
    (info.id() == program_id).then(|| info.tag())
}

/// A pinned tcx link, checked against the device it should be on.
enum PinnedState {
    Missing,
    /// The pin outlived its attachment (device deleted or renamed).
    Stale,
    Attached {
        link_id: u32,
        program_id: u32,
    },
}

fn inspect_pin(pin: &Path, ifindex: Option<u32>) -> Result<PinnedState> {
    match linkinfo::read(pin) {
        Ok(info) if info.ifindex != 0 && Some(info.ifindex) == ifindex => {
            Ok(PinnedState::Attached { link_id: info.id, program_id: info.prog_id })
        }
        // A netkit peer link reports the pod-side device, whose index is
        // another namespace's; the pair dies as a whole, so "still has a
        // device" is what attached means here.
        Ok(info) if info.attach_type == linkinfo::BPF_NETKIT_PEER && info.ifindex != 0 && ifindex.is_some() => {
            Ok(PinnedState::Attached { link_id: info.id, program_id: info.prog_id })
        }
        Ok(_) => Ok(PinnedState::Stale),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(PinnedState::Missing),
        Err(e) => Err(e).with_context(|| format!("reading pinned link {}", pin.display())),
    }
}

/// Reconciles attachments with the desired devices. Loads the BPF object
/// only when something has to be attached or replaced, so a reconcile with
/// nothing to do costs a few syscalls and leaves no stray programs behind.
pub struct Attacher {
    paths: Paths,
    /// The objects loaded so far, by name; each is loaded on first use.
    loaded: BTreeMap<&'static str, Ebpf>,
    /// Tags of the programs this agent carries, learnt on first load.
    tags: BTreeMap<&'static str, u64>,
}

impl Attacher {
    pub fn new(paths: Paths) -> Attacher {
        Attacher { paths, loaded: BTreeMap::new(), tags: BTreeMap::new() }
    }

    /// Loads the host object to verify it and learn its program tags; the
    /// first reconcile reuses it, then lets it go.
    pub fn verify(&mut self) -> Result<()> {
        self.ebpf(AttachPoint::Ingress)?;
        Ok(())
    }

    /// Loads the translator, which verifies it and creates (or opens) its
    /// pinned tables, so they can be filled before it is attached anywhere.
    pub fn prepare_nat64(&mut self) -> Result<()> {
        self.ebpf(AttachPoint::Nat64)?;
        Ok(())
    }

    /// The object holding `direction`'s program, loaded on first use.
    fn ebpf(&mut self, direction: AttachPoint) -> Result<&mut Ebpf> {
        let object = direction.object();
        if !self.loaded.contains_key(object.name) {
            fs::create_dir_all(&self.paths.pin_dir).with_context(|| format!("creating {}", self.paths.pin_dir.display()))?;
            let ebpf = object.load(&self.paths.pin_dir)?;
            for &name in object.programs {
                let program = ebpf.program(name).with_context(|| format!("BPF object has no program {name}"))?;
                self.tags.insert(name, program.info()?.tag());
            }
            self.loaded.insert(object.name, ebpf);
        }
        Ok(self.loaded.get_mut(object.name).expect("loaded above"))
    }

    fn tag(&mut self, direction: AttachPoint) -> Result<u64> {
        if !self.tags.contains_key(direction.program()) {
            self.ebpf(direction)?;
        }
        Ok(self.tags[direction.program()])
    }

    /// Drops our handles: attached programs stay, held by their links.
    pub fn release(&mut self) {
        self.loaded.clear();
    }

    pub fn reconcile(&mut self, global_mode: TcMode, wanted: &Wanted, previous: &[Attachment]) -> Vec<Attachment> {
        let mut report = Vec::new();
        for ((device, direction), target) in wanted {
            let (direction, ifindex) = (*direction, target.ifindex);
            let mode = match (direction, target.netkit) {
                (AttachPoint::Xdp, _) => Hook::Xdp,
                (_, true) => Hook::Netkit,
                (_, false) => global_mode.into(),
            };
            let known = previous.iter().find(|a| {
                a.device == *device && a.ifindex == ifindex && a.direction == direction && a.mode == mode && a.error.is_none()
            });
            // A device that declined native XDP is not asked again until it
            // changes (a new ifindex) or the agent restarts.
            if let Some(declined) = known.filter(|a| a.action == AttachAction::Declined && target.optional) {
                report.push(declined.clone());
                continue;
            }
            let result = match (mode, known) {
                (Hook::Tcx | Hook::Netkit | Hook::Xdp, _) => self.attach_link(device, ifindex, direction, mode, known.is_some()),
                (Hook::Clsact, Some(known)) => {
                    Ok(Outcome { action: AttachAction::Unchanged, program_id: known.program_id, link_id: None })
                }
                (Hook::Clsact, None) => self.attach_clsact(device, direction),
            };
            let (outcome, error, note) = match result {
                Ok(outcome) => (outcome, None, None),
                Err(e) if target.optional && no_native_xdp(&e) => {
                    (Outcome { action: AttachAction::Declined, program_id: None, link_id: None }, None, Some(declined_reason(&e)))
                }
                Err(e) => {
                    (Outcome { action: AttachAction::Failed, program_id: None, link_id: None }, Some(format!("{e:#}")), None)
                }
            };
            if let Some(error) = &error {
                log::error!("{device} {}: {error}", direction.name());
            } else if let Some(note) = &note {
                log::info!("{device} {}: {note}", direction.name());
            } else if outcome.action != AttachAction::Unchanged {
                log::info!("{device} {}: {} ({mode:?})", direction.name(), outcome.action);
            }
            report.push(Attachment {
                device: device.clone(),
                ifindex,
                direction,
                mode,
                action: outcome.action,
                program_id: outcome.program_id,
                link_id: outcome.link_id,
                error,
                note,
            });
        }
        // Removing what is no longer wanted comes last, so a device moving
        // between modes is never left without a program in between.
        self.remove_unwanted(global_mode, wanted, previous);
        self.release();
        report
    }

    /// A tcx or netkit link, pinned: adopted when a previous agent left the
    /// same program attached, updated in place when another build is.
    fn attach_link(&mut self, device: &str, ifindex: u32, direction: AttachPoint, mode: Hook, known: bool) -> Result<Outcome> {
        let pin = link_pin(&self.paths, device, direction);
        let program_pin = program_pin(&self.paths, device, direction);
        match inspect_pin(&pin, Some(ifindex))? {
            PinnedState::Attached { link_id, program_id } => {
                let current = pinned_program_tag(&self.paths, device, direction, program_id);
                if current == Some(self.tag(direction)?) {
                    let action = if known { AttachAction::Unchanged } else { AttachAction::Adopted };
                    return Ok(Outcome { action, program_id: Some(program_id), link_id: Some(link_id) });
                }
                // A different build of the program is attached (agent upgrade,
                // or a developer's override): swap it in place with
                // BPF_LINK_UPDATE, which the kernel does atomically per packet.
                if mode == Hook::Xdp {
                    let program = xdp_program(self.ebpf(direction)?)?;
                    let new_id = program.info()?.id();
                    let link = XdpLink::try_from(FdLink::from(PinnedLink::from_pin(&pin)?))?;
                    let id = program.attach_to_link(link)?;
                    let _: FdLink = program.take_link(id)?.try_into()?;
                    repin(self.ebpf(direction)?, direction, &program_pin)?;
                    return Ok(Outcome { action: AttachAction::Replaced, program_id: Some(new_id), link_id: Some(link_id) });
                }
                let program = bpf::classifier(self.ebpf(direction)?, direction.program())?;
                let new_id = program.info()?.id();
                if mode == Hook::Netkit {
                    // aya knows netkit links only by type; update by syscall.
                    linkinfo::update(&pin, program.fd()?.as_fd().as_raw_fd())
                        .with_context(|| format!("updating {}", pin.display()))?;
                } else {
                    let link = FdLink::from(PinnedLink::from_pin(&pin)?);
                    let id = program.attach_to_link(SchedClassifierLink::try_from(link)?)?;
                    let _: FdLink = program.take_link(id)?.try_into()?;
                }
                repin(self.ebpf(direction)?, direction, &program_pin)?;
                Ok(Outcome { action: AttachAction::Replaced, program_id: Some(new_id), link_id: Some(link_id) })
            }
            state => {
                if matches!(state, PinnedState::Stale) {
                    log::info!("{}: removing stale pin", pin.display());
                    fs::remove_file(&pin).with_context(|| format!("removing {}", pin.display()))?;
                }
                for dir in [self.paths.links_dir(), self.paths.programs_dir()] {
                    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                }
                if mode == Hook::Xdp {
                    let program = xdp_program(self.ebpf(direction)?)?;
                    let program_id = program.info()?.id();
                    // The driver's own mode only: aya would otherwise let the
                    // kernel fall back to generic XDP.
                    let id = program
                        .attach_to_if_index(ifindex, XdpMode::Driver)
                        .with_context(|| format!("attaching native XDP to {device}"))?;
                    let link: FdLink = program.take_link(id)?.try_into().context("the kernel has no XDP links (Linux 5.9+)")?;
                    let link_id = link.info()?.id();
                    link.pin(&pin).with_context(|| format!("pinning {}", pin.display()))?;
                    repin(self.ebpf(direction)?, direction, &program_pin)?;
                    return Ok(Outcome { action: AttachAction::Attached, program_id: Some(program_id), link_id: Some(link_id) });
                }
                let program = bpf::classifier(self.ebpf(direction)?, direction.program())?;
                let program_id = program.info()?.id();
                let link_id = if mode == Hook::Netkit {
                    let fd = program.fd()?.as_fd().as_raw_fd();
                    let link = linkinfo::create_netkit(fd, ifindex, direction.netkit_attach_type())
                        .with_context(|| format!("attaching to netkit device {device}"))?;
                    linkinfo::pin(&link, &pin).with_context(|| format!("pinning {}", pin.display()))?;
                    linkinfo::read(&pin).with_context(|| format!("reading {}", pin.display()))?.id
                } else {
                    let id = program.attach_with_options(device, direction.tc(), TcAttachOptions::TcxOrder(direction.order()))?;
                    let link: FdLink = program.take_link(id)?.try_into()?;
                    let link_id = link.info()?.id();
                    link.pin(&pin).with_context(|| format!("pinning {}", pin.display()))?;
                    link_id
                };
                repin(self.ebpf(direction)?, direction, &program_pin)?;
                Ok(Outcome { action: AttachAction::Attached, program_id: Some(program_id), link_id: Some(link_id) })
            }
        }
    }

    fn attach_clsact(&mut self, device: &str, direction: AttachPoint) -> Result<Outcome> {
        // Fails with EEXIST when the qdisc is there already; any other
        // failure shows up as the attach error below.
        let _ = tc::qdisc_add_clsact(device);
        let program = bpf::classifier(self.ebpf(direction)?, direction.program())?;
        let program_id = program.info()?.id();
        let options = NlOptions { priority: direction.clsact_priority(), handle: TcHandle::from(CLSACT_HANDLE), classid: None };
        let (action, id) = match program.attach_with_options(device, direction.tc(), TcAttachOptions::Netlink(options)) {
            Ok(id) => (AttachAction::Attached, id),
            Err(_) => {
                // Our filter is there from a previous agent: cls_bpf swaps the
                // program of an existing filter atomically.
                let existing = SchedClassifierLink::attached(
                    device,
                    direction.tc(),
                    direction.clsact_priority(),
                    TcHandle::from(CLSACT_HANDLE),
                    None,
                )?;
                (AttachAction::Replaced, program.attach_to_link(existing)?)
            }
        };
        // Dropping a netlink link detaches it: the filter must outlive us.
        std::mem::forget(program.take_link(id)?);
        Ok(Outcome { action, program_id: Some(program_id), link_id: None })
    }

    fn remove_unwanted(&mut self, mode: TcMode, wanted: &Wanted, previous: &[Attachment]) {
        for (device, direction, pin) in pinned_links(&self.paths) {
            let linked = |t: &Target| t.netkit || mode == TcMode::Tcx || direction == AttachPoint::Xdp;
            if wanted.get(&(device.clone(), direction)).is_some_and(linked) {
                continue;
            }
            let _ = fs::remove_file(program_pin(&self.paths, &device, direction));
            match fs::remove_file(&pin) {
                Ok(()) => log::info!("{device} {}: detached (tcx)", direction.name()),
                Err(e) => log::error!("{device} {}: cannot remove {}: {e}", direction.name(), pin.display()),
            }
        }
        for old in previous.iter().filter(|a| a.mode == Hook::Clsact && a.error.is_none()) {
            let target = wanted.get(&(old.device.clone(), old.direction));
            if mode == TcMode::Clsact && target.is_some_and(|t| !t.netkit && t.ifindex == old.ifindex) {
                continue;
            }
            match detach_clsact(&old.device, old.direction) {
                Ok(()) => log::info!("{} {}: detached (clsact)", old.device, old.direction.name()),
                Err(e) => log::warn!("{} {}: {e:#}", old.device, old.direction.name()),
            }
        }
    }
}

/// Pins the program a link now runs beside the link, replacing the old pin.
fn repin(ebpf: &mut Ebpf, direction: AttachPoint, path: &Path) -> Result<()> {
    files::remove(path).with_context(|| format!("removing {}", path.display()))?;
    let program: &mut Program =
        ebpf.program_mut(direction.program()).with_context(|| format!("BPF object has no program {}", direction.program()))?;
    program.pin(path).with_context(|| format!("pinning {}", path.display()))
}

fn xdp_program(ebpf: &mut Ebpf) -> Result<&mut Xdp> {
    let name = AttachPoint::Xdp.program();
    Ok(ebpf.program_mut(name).with_context(|| format!("BPF object has no program {name}"))?.try_into()?)
}

/// The errors with which a device says it has no native XDP: the driver
/// implements none (EOPNOTSUPP), or not for the device as it is set up now
/// (its MTU, queues or offloads: EINVAL, ERANGE, ENOSPC, EBUSY from a
/// program someone else attached).
fn no_native_xdp(error: &anyhow::Error) -> bool {
    error.chain().filter_map(|cause| cause.downcast_ref::<std::io::Error>()).any(|e| {
        matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ERANGE | libc::ENOSPC | libc::EBUSY | libc::EEXIST)
        )
    })
}

fn declined_reason(error: &anyhow::Error) -> String {
    format!("no native XDP, tc alone runs the device: {error:#}")
}

pub fn detach_clsact(device: &str, direction: AttachPoint) -> Result<()> {
    let link =
        SchedClassifierLink::attached(device, direction.tc(), direction.clsact_priority(), TcHandle::from(CLSACT_HANDLE), None)?;
    link.detach().map_err(anyhow::Error::from)
}

/// Which path an uplink's arriving frames take first, and why.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UplinkPath {
    pub device: String,
    /// Native XDP in the driver, then tc; or tc alone.
    pub xdp: bool,
    pub why: String,
}

/// The uplinks' paths, from what reconciling them did: every device with
/// the host program at tc ingress is an uplink.
pub fn uplink_paths(attachments: &[Attachment]) -> Vec<UplinkPath> {
    attachments
        .iter()
        .filter(|a| a.direction == AttachPoint::Ingress)
        .map(|uplink| {
            let xdp = attachments.iter().find(|a| a.device == uplink.device && a.direction == AttachPoint::Xdp);
            let (runs_xdp, why) = match xdp {
                None => (false, "attach.xdp chooses tc".to_owned()),
                Some(a) if a.runs_native_xdp() => (true, "native XDP in the driver".to_owned()),
                Some(a) => (false, a.note.clone().or_else(|| a.error.clone()).unwrap_or_default()),
            };
            UplinkPath { device: uplink.device.clone(), xdp: runs_xdp, why }
        })
        .collect()
}

/// Link pins under `<pin_dir>/links`, parsed into device and direction.
pub fn pinned_links(paths: &Paths) -> Vec<(String, AttachPoint, PathBuf)> {
    let Ok(entries) = fs::read_dir(paths.links_dir()) else { return Vec::new() };
    let mut links: Vec<_> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (device, direction) = parse_link_pin(&name)?;
            Some((device, direction, e.path()))
        })
        .collect();
    links.sort();
    links
}

/// A pinned link as the kernel sees it now, for `status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveLink {
    pub device: String,
    pub direction: AttachPoint,
    pub pin: PathBuf,
    pub link_id: Option<u32>,
    pub program_id: Option<u32>,
    pub program: Option<String>,
    pub tag: Option<String>,
    pub attached: bool,
}

pub fn live_links(paths: &Paths) -> Vec<LiveLink> {
    let ifindexes = netdev::devices().unwrap_or_default();
    pinned_links(paths)
        .into_iter()
        .map(|(device, direction, pin)| {
            let mut live = LiveLink {
                device: device.clone(),
                direction,
                pin: pin.clone(),
                link_id: None,
                program_id: None,
                program: None,
                tag: None,
                attached: false,
            };
            let ifindex = ifindexes.get(&device).copied();
            if let Ok(PinnedState::Attached { link_id, program_id }) = inspect_pin(&pin, ifindex) {
                live.attached = true;
                live.link_id = Some(link_id);
                live.program_id = Some(program_id);
                if let Ok(info) = ProgramInfo::from_pin(program_pin(paths, &device, direction)) {
                    if info.id() == program_id {
                        live.program = info.name_as_str().map(str::to_owned);
                        live.tag = Some(format!("{:016x}", info.tag()));
                    }
                }
            }
            live
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_pin_names_round_trip_even_with_dashes_and_dots_in_device_names() {
        let paths = Paths { pin_dir: "/p".into(), state_dir: "/s".into(), config_root: "/".into(), cni_conf_dir: "/c".into() };
        for device in ["eth0", "br-lan", "eth0.100", "en-p-1"] {
            for direction in AttachPoint::ALL {
                let pin = link_pin(&paths, device, direction);
                let name = pin.file_name().unwrap().to_str().unwrap();
                assert_eq!(parse_link_pin(name), Some((device.to_owned(), direction)));
            }
        }
    }

    #[test]
    fn foreign_files_in_the_links_directory_are_not_ours() {
        assert_eq!(parse_link_pin("eth0"), None);
        assert_eq!(parse_link_pin("eth0-sideways"), None);
    }
}
