//! How a hold is followed once it is taken: a [`TrackedHold`] names one hold, and the lock says
//! where it stands — held until its local deadline, released, or lost — however many holds came
//! after it. The core's own keep-alive (`Lock::keep_alive`) follows its hold this way; so does a
//! binding that drives a lock step by step and keeps a watcher per hold (the JS face: the run's
//! loss signal and `autoExtend`). Builds without such a binding leave part of it unused.
#![cfg_attr(not(feature = "js"), allow(dead_code))]

use alloc::rc::Rc;
use core::cell::Cell;

use super::{Ending, Hold, Lock};
use crate::holding::HoldState;
use crate::runtime::Runtime;
use crate::store::LockStore;
use crate::token::OwnerToken;

/// One hold a watcher looks after: its owner token, and how it ended once it has.
#[derive(Clone)]
pub(crate) struct TrackedHold {
    owner: OwnerToken,
    ending: Rc<Cell<Ending>>,
}

impl TrackedHold {
    /// The hold's owner token.
    pub(crate) fn owner(&self) -> &OwnerToken {
        &self.owner
    }
}

impl<S: LockStore, R: Runtime> Lock<S, R> {
    /// Whether this handle neither holds the key nor knows a hold of its lost.
    pub(crate) fn is_idle(&self) -> bool {
        matches!(&*self.hold.borrow(), Hold::None)
    }

    /// Starts tracking the hold taken with `owner`, for a watcher. A hold that has already
    /// ended counts as released when this handle holds nothing, and as lost otherwise.
    pub(crate) fn track(&self, owner: &OwnerToken) -> TrackedHold {
        self.track_reusing(owner, None)
    }

    /// [`Lock::track`], reusing `spent`'s record when nothing else refers to it any more (a
    /// binding that tracks every run's hold allocates once, not per run).
    pub(crate) fn track_reusing(
        &self,
        owner: &OwnerToken,
        spent: Option<TrackedHold>,
    ) -> TrackedHold {
        let mut hold = self.hold.borrow_mut();
        let ending = match &mut *hold {
            Hold::Held {
                owner: current,
                ending,
                ..
            } if current == owner => ending
                .get_or_insert_with(|| match spent {
                    Some(spent) if Rc::strong_count(&spent.ending) == 1 => {
                        spent.ending.set(Ending::Holding);
                        spent.ending
                    }
                    _ => Rc::new(Cell::new(Ending::Holding)),
                })
                .clone(),
            Hold::None => Rc::new(Cell::new(Ending::Released)),
            _ => Rc::new(Cell::new(Ending::Lost)),
        };
        TrackedHold {
            owner: owner.clone(),
            ending,
        }
    }

    /// Where a tracked hold stands: released by this handle (or being released), held until
    /// its local deadline, or lost (refused by the store, or replaced by a hold it never
    /// released).
    pub(crate) fn hold_state(&self, tracked: &TrackedHold) -> HoldState {
        if tracked.ending.get() == Ending::Released {
            return HoldState::Released;
        }
        match &*self.hold.borrow() {
            Hold::Held {
                owner, deadline, ..
            } if *owner == tracked.owner => HoldState::Held {
                deadline: *deadline,
            },
            _ => HoldState::Lost,
        }
    }
}
