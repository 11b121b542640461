//! Moves between regions on the data path (docs/moves.md): what the plan step does with
//! an id a `moves:` entry covers, for every protocol.
//!
//! The plan step (`phases.rs` `Proxy::plan`) calls [`Proxy::move_step`] when the table's
//! decision is `Rule::Move`: the region is the move's `from` until its flip and `to`
//! after, by the phase this edge installed last (`crate::moves`), and the request's
//! [`Step`]: a read in `mirror` copied to `to` at `mirror_ratio` ([`Proxy::mirror`], on a
//! task of its own through `Proxy::send` and the one attempt loop, its answer discarded
//! and its status class compared with the original's when the life ends); a write in
//! `mirror` counted in flight to `from` until its answer is relayed; a write in `fence`,
//! or after the flip while `from` still has one of the group, held ([`Proxy::release`]).
//! A request whose id no move covers never comes here.
//!
//! The own engine's head path carries a move's reads and writes that need no wait; a read
//! it copies and a write it holds go to the shared phases (`h1/bridge.rs`), which await.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::BodyExt;
use tokio::sync::oneshot;

use super::Proxy;
use crate::extract::Access;
use crate::http1::write;
use crate::moves::{Copy, FromWrite, MoveState, Release};
use crate::problem::Problem;
use crate::table::{MovePhase, RegionId};
use crate::upstream::forward::{self, Outgoing};
use crate::upstream::regions::Routing;

/// `X-Iuid-Region`: the region the router chose (`decision_headers: true`).
pub static REGION: HeaderName = HeaderName::from_static("x-iuid-region");
/// `X-Iuid-Move`: `<name>; phase=<phase>` when a move applied (`decision_headers: true`).
pub static MOVE: HeaderName = HeaderName::from_static("x-iuid-move");
/// `X-Iuid-Mirror: 1` on a mirror's copy.
pub static MIRROR: HeaderName = HeaderName::from_static("x-iuid-mirror");

/// What a move asks of one request, decided in the plan step.
#[derive(Debug)]
pub(super) struct Moving {
    /// `moves[index]` of the request's table snapshot.
    pub index: usize,
    /// The move's runtime (`None`: the snapshot has none for it).
    pub state: Option<Arc<MoveState>>,
    /// The phase the request was served under (`None`: the move was removed meanwhile).
    pub phase: Option<MovePhase>,
    /// What is left to do.
    pub step: Step,
}

impl Moving {
    fn new(
        index: usize,
        state: Option<Arc<MoveState>>,
        phase: Option<MovePhase>,
        step: Step,
    ) -> Moving {
        Moving {
            index,
            state,
            phase,
            step,
        }
    }

    /// Its write to `from`, for the life to carry until its answer is relayed.
    pub(super) fn take_write(&mut self) -> Option<FromWrite> {
        match std::mem::replace(&mut self.step, Step::Go) {
            Step::Write(write) => Some(write),
            other => {
                self.step = other;
                None
            }
        }
    }
}

/// The part of a move's phase one request still has to go through.
#[derive(Debug)]
pub(super) enum Step {
    /// Nothing: it goes to the plan's region.
    Go,
    /// A read copied to `to` (the region's id in the request's snapshot).
    Mirror(Arc<MoveState>, RegionId),
    /// A write held until the flip (or until `from` has finished the group's writes).
    Hold(Arc<MoveState>),
    /// A write to `from`, counted in flight until its answer is relayed.
    Write(FromWrite),
}

/// Where the head path's moved request goes ([`Proxy::move_on_head`]).
pub(super) enum HeadMove {
    /// Carried here, to this region.
    Here(RegionId),
    /// A read to copy: the shared phases send the copy (told so, not asked again).
    Copied,
    /// A write to hold (or a move the snapshot lacks): the shared phases.
    Shared,
}

/// What a moved request's life carries (`Life::moved`): the head path's choice to copy
/// it, its write to `from`, the copy waiting for the original's status.
#[derive(Debug, Default)]
pub(crate) struct Moved {
    /// The head path chose whether to copy it before handing it over.
    pub sampled: Option<bool>,
    /// Its write in flight to `from` (the head path keeps it in its life; the shared
    /// phases move it into the answer's body).
    pub write: Option<crate::moves::FromWrite>,
    /// The copy's wait for the original's status, sent by `Life::finish`.
    pub status: Option<tokio::sync::oneshot::Sender<u16>>,
}

impl Proxy {
    /// The region and the step of a request whose id `moves[index]` covers (docs/moves.md):
    /// `region` is the table's decision. Asked: whether it reads or writes; the head path's
    /// choice to copy it (else made here); whether it is a copy another edge sent (served
    /// by `to` as it is: "In a mesh").
    pub(super) fn move_step(
        &self,
        routing: &Routing,
        index: usize,
        region: RegionId,
        (access, sampled, copy): (Access, Option<bool>, bool),
    ) -> (RegionId, Moving) {
        let found = routing
            .table
            .moves
            .get(index)
            .zip(routing.move_state(index));
        let Some((spec, state)) = found else {
            return (region, Moving::new(index, None, None, Step::Go));
        };
        let phase = state.phase();
        let (region, step) = match (phase, access) {
            // Another edge's copy ("In a mesh"): served by `to`, as it is.
            (_, Access::Read) if copy => (spec.to, Step::Go),
            (Some(MovePhase::Mirror), Access::Read) => {
                let copied = sampled.unwrap_or_else(|| state.sample(spec.mirror_ratio));
                let step = match copied {
                    true => Step::Mirror(state.clone(), spec.to),
                    false => Step::Go,
                };
                (spec.from, step)
            }
            (Some(MovePhase::Mirror), Access::Write) => match state.write_to_from() {
                Some(write) => (spec.from, Step::Write(write)),
                None => (spec.from, Step::Hold(state.clone())),
            },
            (Some(MovePhase::Fence), Access::Write) => (spec.from, Step::Hold(state.clone())),
            (Some(MovePhase::Fence), Access::Read) => (spec.from, Step::Go),
            (Some(MovePhase::Flip), Access::Write) if state.writes_to_from() > 0 => {
                (spec.to, Step::Hold(state.clone()))
            }
            (Some(MovePhase::Flip), _) => (spec.to, Step::Go),
            (None, _) => (region, Step::Go),
        };
        (region, Moving::new(index, Some(state.clone()), phase, step))
    }

    /// On the own engine's head path, before the plan step: whether it carries a request
    /// whose id `moves[index]` covers, and to which region, or hands it to the shared
    /// phases (a write to hold; a read to copy, chosen here: [`HeadMove::Copied`]).
    ///
    /// `copy`: another edge's mirror copy ("In a mesh"): a read served by `to`.
    pub(super) fn move_on_head(
        &self,
        routing: &Routing,
        index: usize,
        (access, copy): (Access, bool),
    ) -> HeadMove {
        let (Some(spec), Some(state)) = (routing.table.moves.get(index), routing.move_state(index))
        else {
            return HeadMove::Shared;
        };
        match (state.phase(), access) {
            (_, Access::Read) if copy => HeadMove::Here(spec.to),
            (Some(MovePhase::Mirror), Access::Read) => match state.sample(spec.mirror_ratio) {
                true => HeadMove::Copied,
                false => HeadMove::Here(spec.from),
            },
            (Some(MovePhase::Mirror), Access::Write) | (Some(MovePhase::Fence), Access::Read) => {
                HeadMove::Here(spec.from)
            }
            (Some(MovePhase::Flip), Access::Read) => HeadMove::Here(spec.to),
            (Some(MovePhase::Flip), Access::Write) if state.writes_to_from() == 0 => {
                HeadMove::Here(spec.to)
            }
            _ => HeadMove::Shared,
        }
    }

    /// A held write's wait (docs/moves.md, `fence`): until the move flips (to `to`, once
    /// this edge's writes of the group to `from` have ended), goes back to `mirror` or is
    /// removed (to `from`), at most `hold_ms`. The serving table then names the region, so
    /// the snapshot comes back too. Errors: 503 `moving` with `Retry-After` after
    /// `hold_ms`, or at once beyond `limits.held_requests`; nothing was forwarded.
    pub(super) async fn release(
        &self,
        routing: &Routing,
        moving: &mut Moving,
    ) -> Result<Option<(Arc<Routing>, RegionId)>, Problem> {
        let Step::Hold(state) = &moving.step else {
            return Ok(None);
        };
        let Some(spec) = routing.table.moves.get(moving.index) else {
            return Ok(None);
        };
        let hold = Duration::from_millis(spec.hold_ms);
        let limit = self.config.limits.held_requests;
        let refused = |held_full| Problem::Moving {
            name: spec.name.clone(),
            retry_after: hold,
            held_full,
        };
        let (name, step) = match state.clone().hold(hold, limit).await {
            Release::To => (&spec.to_name, Step::Go),
            Release::From(write) => (&spec.from_name, Step::Write(write)),
            Release::TimedOut => return Err(refused(None)),
            Release::Refused => return Err(refused(Some(limit))),
        };
        let serving = self.regions.current();
        let region = serving.by_name(name).ok_or_else(|| refused(None))?;
        moving.phase = state.phase();
        moving.step = step;
        Ok(Some((serving, region)))
    }

    /// A read the plan step chose to copy ([`Step::Mirror`]): a copy of it (`parts` as it
    /// goes upstream, its whole `body`) sent to the move's `to` on a task of its own,
    /// never on the client's path, bounded by `limits.mirrors_in_flight`. Its status class
    /// is compared with the original's once the request's life ends (`moved.status`). A
    /// body that streams cannot be sent twice: that copy is counted `dropped`.
    pub(super) fn mirror(
        &self,
        moving: &Moving,
        routing: &Routing,
        parts: &Parts,
        body: &Outgoing,
        moved: &mut Option<Box<Moved>>,
    ) {
        let Step::Mirror(state, to) = &moving.step else {
            return;
        };
        let Outgoing::Held(body) = body else {
            state.metrics.mirrored(crate::moves::MirrorOutcome::Dropped);
            return;
        };
        let Some(proxy) = self.me.upgrade() else {
            return;
        };
        let Some(copy) = state.copy(self.config.limits.mirrors_in_flight) else {
            return;
        };
        let mut head = forward::copy_head(parts);
        head.headers
            .insert(MIRROR.clone(), HeaderValue::from_static("1"));
        let (status, original) = oneshot::channel();
        moved.get_or_insert_with(Box::default).status = Some(status);
        let (to, body) = (routing.region(*to).name.clone(), body.clone());
        tokio::spawn(async move { proxy.send_copy(copy, to, head, body, original).await });
    }

    /// A copy's exchange with `to`, its answer read to the end and dropped.
    async fn send_copy(
        self: Arc<Self>,
        copy: Copy,
        to: String,
        head: Parts,
        body: Bytes,
        original: oneshot::Receiver<u16>,
    ) {
        let routing = self.regions.current();
        let status = match routing.by_name(&to) {
            None => None,
            Some(id) => {
                let region = routing.region(id);
                match self
                    .send(
                        (&routing, region),
                        head,
                        Outgoing::Held(body),
                        None,
                        (None, true),
                    )
                    .await
                {
                    Ok(answered) => {
                        let status = answered.response.status().as_u16();
                        let mut body = answered.response.into_body();
                        let idle = self.config.timeouts.idle();
                        while let Ok(Some(Ok(_))) = tokio::time::timeout(idle, body.frame()).await {
                        }
                        Some(status)
                    }
                    Err(_) => None,
                }
            }
        };
        let original = original.await.ok();
        let name = copy.name().to_owned();
        let outcome = copy.compared(original, status);
        tracing::debug!(r#move = name, ?original, ?status, ?outcome, "mirror copy");
    }

    /// `decision_headers: true`: the region chosen and the move applied, for the upstream
    /// (docs/moves.md).
    pub(super) fn decision_fields(
        &self,
        headers: &mut HeaderMap,
        routing: &Routing,
        region: RegionId,
        moving: Option<&Moving>,
    ) {
        if !self.config.decision_headers {
            return;
        }
        if let Ok(v) = HeaderValue::from_str(&routing.region(region).name) {
            headers.insert(REGION.clone(), v);
        }
        if let Some(line) = moving.and_then(move_value) {
            if let Ok(v) = HeaderValue::from_str(&line) {
                headers.insert(MOVE.clone(), v);
            }
        }
    }
}

/// `decision_headers: true` on the own engine's head path: the same fields as
/// [`Proxy::decision_fields`], as lines of the head going upstream.
pub(super) fn decision_lines(
    out: &mut Vec<u8>,
    routing: &Routing,
    region: RegionId,
    moving: Option<&Moving>,
) {
    write::field(
        out,
        b"X-Iuid-Region",
        routing.region(region).name.as_bytes(),
    );
    if let Some(value) = moving.and_then(move_value) {
        write::field(out, b"X-Iuid-Move", value.as_bytes());
    }
}

/// `X-Iuid-Move`'s value: `<name>; phase=<phase>`.
pub(super) fn move_value(moving: &Moving) -> Option<String> {
    let (state, phase) = (moving.state.as_ref()?, moving.phase?);
    Some(format!("{}; phase={}", state.name, phase.as_str()))
}
