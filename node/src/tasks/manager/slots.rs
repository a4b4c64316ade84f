//! The node's running slots, shared fairly between roles.
//!
//! A turn runs once it holds a [`Slot`]: one of the node's `max_running` and one of its
//! role's own limit. A turn that cannot have one waits in its role's queue, first come
//! first served; when a slot frees, the roles with turns waiting take it in turn (round
//! robin), so one role's backlog never keeps another role's turns from the next free slot,
//! and a role at its own limit leaves the rest of the node to the others.
//!
//! Written here rather than with a semaphore per role: a turn needs two permits at once (the
//! node's and its role's), and taking them one after the other either holds a node permit
//! while the role is full (starving other roles) or lets later turns overtake.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// Which limit a waiting turn waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its role runs as many turns as the role may.
    Role { running: usize, limit: usize },
    /// The node runs as many turns as it may.
    Node { running: usize, limit: usize },
}

/// The node's slots.
pub(crate) struct Slots {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    roles: HashMap<Arc<str>, Role>,
    /// Roles with turns waiting, in the order they take the next free slots.
    turns: VecDeque<Arc<str>>,
}

struct Role {
    running: usize,
    limit: usize,
    waiting: VecDeque<oneshot::Sender<Slot>>,
}

/// A running turn's place: given back when dropped.
pub(crate) struct Slot {
    /// `None` once given back.
    slots: Option<Arc<Slots>>,
    role: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.give_back(&self.role);
        }
    }
}

/// A turn's place in its role's queue.
pub(crate) struct Waiting {
    receiver: oneshot::Receiver<Slot>,
    /// What it waits for, as it was when it began to wait.
    pub(crate) full: Full,
}

impl Waiting {
    /// Returns the slot once this turn has one. Cancel-safe: dropped first, the turn leaves
    /// the queue (a slot given to it meanwhile goes to the next turn).
    pub(crate) async fn slot(&mut self) -> Slot {
        match (&mut self.receiver).await {
            Ok(slot) => slot,
            // The sender lives in the queue until it sends; `Slots` outlives its waiters.
            Err(_) => std::future::pending().await,
        }
    }
}

impl Slots {
    /// Slots for `limit` turns at once (at least one).
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Slots free now.
    pub(crate) fn free(&self) -> usize {
        self.limit.saturating_sub(self.state().running)
    }

    /// A slot for a turn of `role`, which may run `role_limit` turns at once: at once when
    /// one is free for it, else a place in the role's queue.
    pub(crate) fn take(self: &Arc<Self>, role: &str, role_limit: usize) -> Result<Slot, Waiting> {
        let mut state = self.state();
        let running = state.running;
        let role = Arc::<str>::from(role);
        let entry = state.roles.entry(role.clone()).or_insert_with(|| Role {
            running: 0,
            limit: role_limit,
            waiting: VecDeque::new(),
        });
        // A role file may have changed its limit: the newest turn's word counts.
        entry.limit = role_limit.max(1);
        let full = if entry.running >= entry.limit {
            Some(Full::Role {
                running: entry.running,
                limit: entry.limit,
            })
        } else if running >= self.limit || !entry.waiting.is_empty() {
            Some(Full::Node {
                running,
                limit: self.limit,
            })
        } else {
            None
        };
        let Some(full) = full else {
            entry.running += 1;
            state.running += 1;
            return Ok(Slot {
                slots: Some(self.clone()),
                role,
            });
        };
        let (sender, receiver) = oneshot::channel();
        entry.waiting.push_back(sender);
        if entry.waiting.len() == 1 {
            state.turns.push_back(role);
        }
        // A raised role limit may have made room for turns already waiting.
        self.hand_out(&mut state);
        Err(Waiting { receiver, full })
    }

    /// One turn of `role` has ended: its slot goes to the next turn waiting.
    fn give_back(self: &Arc<Self>, role: &str) {
        let mut state = self.state();
        state.running = state.running.saturating_sub(1);
        if let Some(entry) = state.roles.get_mut(role) {
            entry.running = entry.running.saturating_sub(1);
        }
        self.hand_out(&mut state);
        state.forget_idle(role);
    }

    /// Gives free slots to waiting turns, one role after another.
    fn hand_out(self: &Arc<Self>, state: &mut State) {
        let mut passed = 0;
        while state.running < self.limit && passed < state.turns.len() {
            let Some(role) = state.turns.pop_front() else {
                break;
            };
            let Some(entry) = state.roles.get_mut(&role) else {
                continue;
            };
            if entry.running >= entry.limit {
                // Full itself: it keeps its place and the next role goes first.
                state.turns.push_back(role);
                passed += 1;
                continue;
            }
            let Some(sender) = entry.waiting.pop_front() else {
                continue;
            };
            entry.running += 1;
            let more = !entry.waiting.is_empty();
            state.running += 1;
            let slot = Slot {
                slots: Some(self.clone()),
                role: role.clone(),
            };
            if let Err(mut unwanted) = sender.send(slot) {
                // That turn stopped waiting: its slot is free again, given back here (the
                // lock is held) rather than by its `Drop`.
                unwanted.slots = None;
                state.running -= 1;
                if let Some(entry) = state.roles.get_mut(&role) {
                    entry.running -= 1;
                }
            } else {
                passed = 0;
            }
            if more {
                state.turns.push_back(role.clone());
            }
            state.forget_idle(&role);
        }
    }
}

impl State {
    /// Forgets a role with nothing running and nothing waiting.
    fn forget_idle(&mut self, role: &str) {
        if self
            .roles
            .get(role)
            .is_some_and(|r| r.running == 0 && r.waiting.is_empty())
        {
            self.roles.remove(role);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    /// The slot `waiting` has been given, if any.
    fn given(waiting: &mut Waiting) -> Option<Slot> {
        waiting.slot().now_or_never()
    }

    #[test]
    fn a_role_at_its_limit_leaves_the_rest_of_the_node_to_other_roles() {
        let slots = Slots::new(3);
        let _a1 = slots.take("a", 2).ok().unwrap();
        let _a2 = slots.take("a", 2).ok().unwrap();
        let Err(a3) = slots.take("a", 2) else {
            panic!("a third task of role a ran beyond its limit");
        };
        assert_eq!(
            a3.full,
            Full::Role {
                running: 2,
                limit: 2
            }
        );
        let _b1 = slots.take("b", 2).ok().unwrap();
        assert_eq!(slots.free(), 0);
        let Err(b2) = slots.take("b", 2) else {
            panic!("a fourth task ran on a node of three slots");
        };
        assert_eq!(
            b2.full,
            Full::Node {
                running: 3,
                limit: 3
            }
        );
    }

    #[test]
    fn freed_slots_go_to_the_waiting_roles_in_turn() {
        let slots = Slots::new(1);
        let first = slots.take("a", 1).ok().unwrap();
        let mut a2 = slots.take("a", 1).err().unwrap();
        let mut a3 = slots.take("a", 1).err().unwrap();
        let mut b1 = slots.take("b", 1).err().unwrap();
        drop(first);
        let second = given(&mut a2).expect("the first in the queue takes the freed slot");
        assert!(given(&mut a3).is_none() && given(&mut b1).is_none());
        drop(second);
        // Role a has had its turn: b's task goes before a's next one.
        let third = given(&mut b1).expect("the other role's task takes the next slot");
        assert!(given(&mut a3).is_none());
        drop(third);
        assert!(given(&mut a3).is_some());
    }

    #[test]
    fn a_turn_that_stops_waiting_leaves_its_slot_to_the_next() {
        let slots = Slots::new(1);
        let first = slots.take("a", 1).ok().unwrap();
        let gone = slots.take("b", 1).err().unwrap();
        let mut next = slots.take("c", 1).err().unwrap();
        drop(gone);
        drop(first);
        let slot = given(&mut next).expect("the slot skips the turn that left");
        assert_eq!(slots.free(), 0);
        drop(slot);
        assert_eq!(slots.free(), 1);
        assert!(slots.state().roles.is_empty(), "idle roles are forgotten");
    }

    #[test]
    fn a_raised_role_limit_lets_its_waiting_turns_run() {
        let slots = Slots::new(4);
        let _a1 = slots.take("a", 1).ok().unwrap();
        let mut a2 = slots.take("a", 1).err().unwrap();
        assert!(given(&mut a2).is_none());
        // The role file now says 3: the next turn's take hands out the room it made.
        let mut a3 = slots.take("a", 3).err().unwrap();
        assert!(given(&mut a2).is_some());
        assert!(given(&mut a3).is_some());
    }
}
