//! Conversions into [`worker::Error`], so that `?` works on keel-lock results inside a
//! workers-rs handler (`async fn fetch(…) -> worker::Result<Response>`).
//!
//! A store error keeps the JS exception the Durable Object call raised (`worker::Error`'s
//! `From<JsValue>` stores the original object, so returning it to JS throws the same error).
//! Everything keel-lock decides itself (bad input, a lock not held, no randomness) becomes a
//! `worker::Error::RustError` with the message its `Display` prints.

use crate::error::{Error, InputError};
use crate::lock::RunError;

impl From<InputError> for worker::Error {
    fn from(e: InputError) -> Self {
        worker::Error::RustError(e.to_string())
    }
}

impl<E: Into<worker::Error>> From<Error<E>> for worker::Error {
    fn from(e: Error<E>) -> Self {
        match e {
            Error::Store { error, .. } => error.into(),
            other => worker::Error::RustError(other.to_string()),
        }
    }
}

/// `try_run` with a task answering `worker::Result`: the task's own error comes back unchanged.
impl<U, E> From<RunError<U, E>> for worker::Error
where
    U: Into<worker::Error>,
    E: Into<worker::Error>,
{
    fn from(e: RunError<U, E>) -> Self {
        match e {
            RunError::Task(task) => task.into(),
            RunError::Lock(lock) => lock.into(),
        }
    }
}
