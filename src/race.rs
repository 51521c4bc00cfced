//! Racing two futures without an executor or a futures dependency: the core waits for "the
//! store answered" or "the caller gave up", whichever comes first, the same way natively, in
//! wasm and in a component.

use crate::prelude::*;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

/// Which of two raced futures finished first.
pub(crate) enum Either<A, B> {
    /// The first.
    First(A),
    /// The second.
    Second(B),
}

/// Polls `first`, then `second`, until one is ready; the other is dropped. `first` wins ties.
pub(crate) async fn race<A: Future, B: Future>(
    first: A,
    second: B,
) -> Either<A::Output, B::Output> {
    let mut first = core::pin::pin!(first);
    let mut second = core::pin::pin!(second);
    core::future::poll_fn(move |cx: &mut Context<'_>| {
        if let Poll::Ready(a) = first.as_mut().poll(cx) {
            return Poll::Ready(Either::First(a));
        }
        if let Poll::Ready(b) = second.as_mut().poll(cx) {
            return Poll::Ready(Either::Second(b));
        }
        Poll::Pending
    })
    .await
}

/// A future that is ready once `flag` is set, re-checked on every poll. Used with a waker the
/// setter stores and wakes.
pub(crate) fn poll_until<F: FnMut(&mut Context<'_>) -> bool>(
    mut ready: F,
) -> impl Future<Output = ()> {
    core::future::poll_fn(move |cx| {
        if ready(cx) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

/// A boxed, non-`Send` future: what stores keep when they hold a timer across polls.
#[allow(dead_code)]
pub(crate) type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
