package cli

// fdReserve is the part of the file-descriptor limit kept out of the
// connection cap: the database files and connections, the listener, logs.
const fdReserve = 64
