//! The control plane: the room directory (more with the gRPC services).

pub mod rooms;
