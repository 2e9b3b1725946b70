package syncerr

// Entry is one row of the error catalog (§10.2).
type Entry struct {
	Code       string
	Category   string
	Retryable  bool
	Action     string
	HTTPStatus int
}

// Catalog codes (§10.2, wire version 3).
const (
	CodeAuthRequired             = "sync.auth_required"
	CodeAuthLeaseRequired        = "sync.auth_lease_required"
	CodeAuthLeaseRevoked         = "sync.auth_lease_revoked"
	CodeForbidden                = "sync.forbidden"
	CodeInvalidRequest           = "sync.invalid_request"
	CodeInvalidClientID          = "sync.invalid_client_id"
	CodeInvalidSubscription      = "sync.invalid_subscription"
	CodeEmptyCommit              = "sync.empty_commit"
	CodeUnknownTable             = "sync.unknown_table"
	CodeRowMissing               = "sync.row_missing"
	CodeRowDeleted               = "sync.row_deleted"
	CodeVersionConflict          = "sync.version_conflict"
	CodeConstraintViolation      = "sync.constraint_violation"
	CodeReferenceViolation       = "sync.reference_violation"
	CodeMissingScopes            = "sync.missing_scopes"
	CodeCRDTMergeFailed          = "sync.crdt_merge_failed"
	CodeIdempotencyCacheMiss     = "sync.idempotency_cache_miss"
	CodeInternalError            = "sync.internal_error"
	CodeStorageStaleRead         = "sync.storage_stale_read"
	CodeSchemaNotReady           = "sync.schema_not_ready"
	CodeTooManyOperations        = "sync.too_many_operations"
	CodeNotFound                 = "sync.not_found"
	CodeSegmentExpired           = "sync.segment_expired"
	CodeCursorExpired            = "sync.cursor_expired"
	CodeScopeRevoked             = "sync.scope_revoked"
	CodeRateLimited              = "sync.rate_limited"
	CodeSchemaMismatch           = "sync.schema_mismatch"
	CodeClientSchemaUnsupported  = "sync.client_schema_unsupported"
	CodeClientWireUnsupported    = "sync.client_wire_unsupported"
	CodeWebsocketConnectionLimit = "sync.websocket_connection_limit"
	CodeBlobNotFound             = "blob.not_found"
	CodeBlobForbidden            = "blob.forbidden"
	CodeBlobHashMismatch         = "blob.hash_mismatch"
	CodeBlobTooLarge             = "blob.too_large"
)

// Lookup returns the catalog entry of a code.
func Lookup(code string) (Entry, bool) {
	e, ok := entry(code)
	e.Code = code
	return e, ok
}

// entry holds the catalog: category, retryable, action, HTTP status. The
// statuses follow the reference server; sync.client_wire_unsupported is the
// wire-version-2 code the server still answers v1 clients with after an
// epoch rotation.
func entry(code string) (Entry, bool) {
	switch code {
	case "operation.unknown":
		return Entry{Category: "not-found", Action: "regenerateClient", HTTPStatus: 404}, true
	case "operation.forbidden":
		return Entry{Category: "forbidden", Action: "checkPermissions", HTTPStatus: 403}, true
	case "operation.invalid_request", "operation.result_too_large":
		return Entry{Category: "invalid-request", Action: "fixRequest", HTTPStatus: 400}, true
	case "operation.storage_unsupported", "operation.query_failed", "operation.execution_failed":
		return Entry{Category: "internal", Action: "inspectServer", HTTPStatus: 500}, true
	case CodeAuthRequired, CodeAuthLeaseRequired, CodeAuthLeaseRevoked:
		return Entry{Category: "auth-required", Retryable: true, Action: "refreshAuth", HTTPStatus: 401}, true
	case CodeForbidden:
		return Entry{Category: "forbidden", Action: "checkPermissions", HTTPStatus: 403}, true
	case CodeInvalidRequest, CodeInvalidSubscription, CodeEmptyCommit,
		CodeConstraintViolation, CodeReferenceViolation:
		return Entry{Category: "invalid-request", Action: "fixRequest", HTTPStatus: 400}, true
	case CodeInvalidClientID:
		return Entry{Category: "invalid-request", Action: "resetClientId", HTTPStatus: 400}, true
	case CodeUnknownTable, CodeSchemaMismatch:
		return Entry{Category: "schema-mismatch", Action: "regenerateClient", HTTPStatus: 400}, true
	case CodeRowMissing:
		return Entry{Category: "not-found", Action: "forceResync", HTTPStatus: 404}, true
	case CodeRowDeleted:
		return Entry{Category: "not-found", Action: "fixRequest", HTTPStatus: 404}, true
	case CodeVersionConflict:
		return Entry{Category: "conflict", Action: "resolveConflict", HTTPStatus: 409}, true
	case CodeMissingScopes, CodeCRDTMergeFailed:
		return Entry{Category: "internal", Action: "inspectServer", HTTPStatus: 500}, true
	case CodeIdempotencyCacheMiss, CodeInternalError:
		return Entry{Category: "internal", Retryable: true, Action: "retryLater", HTTPStatus: 500}, true
	case CodeStorageStaleRead:
		return Entry{Category: "internal", Action: "inspectServer", HTTPStatus: 500}, true
	case CodeSchemaNotReady:
		return Entry{Category: "internal", Retryable: true, Action: "retryLater", HTTPStatus: 503}, true
	case CodeTooManyOperations:
		return Entry{Category: "invalid-request", Action: "splitBatch", HTTPStatus: 400}, true
	case CodeNotFound:
		return Entry{Category: "not-found", Action: "forceResync", HTTPStatus: 404}, true
	case CodeSegmentExpired:
		return Entry{Category: "not-found", Retryable: true, Action: "retryLater", HTTPStatus: 404}, true
	case CodeCursorExpired:
		return Entry{Category: "reset-required", Action: "rebootstrap", HTTPStatus: 400}, true
	case CodeScopeRevoked:
		return Entry{Category: "scope-revoked", Action: "checkPermissions", HTTPStatus: 403}, true
	case CodeRateLimited, CodeWebsocketConnectionLimit:
		return Entry{Category: "rate-limited", Retryable: true, Action: "retryLater", HTTPStatus: 429}, true
	case CodeClientSchemaUnsupported, CodeClientWireUnsupported:
		return Entry{Category: "schema-mismatch", Action: "upgradeClient", HTTPStatus: 400}, true
	case CodeBlobNotFound:
		return Entry{Category: "not-found", Action: "fixRequest", HTTPStatus: 404}, true
	case CodeBlobForbidden:
		return Entry{Category: "forbidden", Action: "checkPermissions", HTTPStatus: 403}, true
	case CodeBlobHashMismatch:
		return Entry{Category: "invalid-request", Action: "fixRequest", HTTPStatus: 400}, true
	case CodeBlobTooLarge:
		return Entry{Category: "invalid-request", Action: "fixRequest", HTTPStatus: 413}, true
	}
	return Entry{}, false
}
