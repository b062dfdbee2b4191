//! Attaching the plan's points to the opened objects (once per traced process, with errors
//! that name the file and probe the user knows), and detaching the objects whose content
//! changed while traced. Apart from the driver because the late stage ([`crate::watch::late`]) stops
//! changed objects the same way.

use super::WatchError;
use crate::plan::Plan;
use crate::target::Object;
use crate::tracer::{TraceError, Tracer};
use crate::util::terminal::clean;

/// Attaches every object's points, once per traced process (or once for all processes).
pub(crate) fn attach(
    tracer: &mut Tracer,
    objects: &[Object],
    plan: &Plan,
    pids: &[u32],
) -> Result<(), WatchError> {
    let pid_targets: Vec<Option<u32>> = if pids.is_empty() {
        vec![None]
    } else {
        pids.iter().map(|&p| Some(p)).collect()
    };
    for op in &plan.objects {
        let o = &objects[op.object];
        let path = o.fd_path();
        let path = path.to_string_lossy();
        for &pid in &pid_targets {
            tracer
                .attach_object(&path, &op.points, pid)
                .map_err(|e| match e {
                    // Name the file and probe the user knows, not /proc/self/fd/N.
                    TraceError::Attach { point, msg, .. } => {
                        let probe = point
                            .and_then(|p| plan.sites.get(p.cookie as usize))
                            .map(|s| format!(" ({}:{})", s.provider, s.name))
                            .unwrap_or_default();
                        TraceError::Attach {
                            path: format!("{}{probe}", o.shown),
                            point,
                            msg,
                        }
                    }
                    e => e,
                })?;
        }
        tracer.name_object(&path, &o.shown);
    }
    Ok(())
}

/// Stops tracing the objects whose content changed ([`crate::watch::changes`]): their uprobes are
/// detached at once, and their semaphores no longer raised by hand, with a warning each. The
/// new content is not traced: planning it again while processes may still run the old one
/// (whose sites no longer match the file) is not safe, so that is left to a new run.
pub(crate) fn stop_changed(
    changed: &[crate::watch::changes::Changed],
    tracer: &mut Tracer,
    mut raiser: Option<&mut crate::watch::semaphores::Raiser>,
) {
    for c in changed {
        let detach = tracer.detach_object(&c.fd_path.to_string_lossy());
        if let Some(r) = raiser.as_deref_mut() {
            r.forget(c.dev, c.inode);
        }
        let sites = match detach {
            crate::tracer::Detach::Done(n) | crate::tracer::Detach::Background { sites: n, .. } => {
                n
            }
        };
        crate::util::terminal::say(&format!(
            "warning: {} was modified in place while traced: its {sites} probe site{} are detached (they sat at the old offsets, which in the new content may be mid-instruction); the new content is not traced: run watch again to trace it",
            clean(&c.shown),
            if sites == 1 { "" } else { "s" }
        ));
    }
}
