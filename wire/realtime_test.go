package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

const (
	helloJSON = `{"event":"hello","data":{"protocolVersion":1,"sessionId":"sess-0001","actorId":"actor-1","clientId":"client-a","cursor":57,"latestCursor":64,"requiresSync":true,"timestamp":1782993600000}}`
	joinJSON  = `{"event":"presence","data":{"scopeKey":"project:p1","kind":"join","actorId":"actor-1","clientId":"client-a","doc":{"cursor":42,"name":"Ada"},"timestamp":1782993600000}}`
)

func testHello() Hello {
	return Hello{
		ProtocolVersion: 1, SessionID: "sess-0001", ActorID: "actor-1", ClientID: "client-a",
		Cursor: 57, LatestCursor: 64, RequiresSync: true, Timestamp: 1782993600000,
	}
}

func helloWith(cursor string) string {
	return `{"event":"hello","data":{"protocolVersion":1,"sessionId":"s","actorId":"a","clientId":"c","cursor":` +
		cursor + `,"latestCursor":64,"requiresSync":false,"timestamp":5}}`
}

func helloCursor(c int64) Hello {
	return Hello{ProtocolVersion: 1, SessionID: "s", ActorID: "a", ClientID: "c", Cursor: c, LatestCursor: 64, Timestamp: 5}
}

func fanout(kind, doc string) string {
	return `{"event":"presence","data":{"scopeKey":"k:1","kind":"` + kind + `","actorId":"a","clientId":"c","doc":` + doc + `,"timestamp":7}}`
}

func TestParseServerEvent(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want ServerEvent // nil: a *DecodeError with sync.invalid_request
	}{
		{"hello", helloJSON, testHello()},
		{"hello pretty", "\n{ \"event\" : \"hello\",\n \"data\": {\"protocolVersion\": 1, \"sessionId\": \"sess-0001\", \"actorId\": \"actor-1\", \"clientId\": \"client-a\", \"cursor\": 57, \"latestCursor\": 64, \"requiresSync\": true, \"timestamp\": 1782993600000 } } \n", testHello()},
		{"integral decimal", helloWith("57.0"), helloCursor(57)},
		{"integral exponent", helloWith("5.7e1"), helloCursor(57)},
		{"negative zero", helloWith("-0"), helloCursor(0)},
		{"max safe", helloWith("9007199254740991"), helloCursor(MaxSafeInteger)},
		{"min safe", helloWith("-9007199254740991"), helloCursor(-MaxSafeInteger)},
		{"fractional", helloWith("57.5"), nil},
		{"beyond safe", helloWith("9007199254740992"), nil},
		{"overflow", helloWith("1e400"), nil},
		{"string number", helloWith(`"57"`), nil},
		{"null number", helloWith(`null`), nil},
		{"extra members ignored", `{"event":"heartbeat","x":1,"data":{"timestamp":3,"y":[1]}}`, Heartbeat{Timestamp: 3}},
		{"duplicate key keeps last", `{"event":"nope","event":"heartbeat","data":{"timestamp":1}}`, Heartbeat{Timestamp: 1}},
		{"escaped strings", `{"event":"pres\u0065nce","data":{"scopeKey":"k\u003a1","error":"\ud83d\ude00\ud800","timestamp":1}}`, PresenceError{ScopeKey: "k:1", Code: "\U0001F600\uFFFD", Timestamp: 1}},
		{"missing data", `{"event":"hello"}`, nil},
		{"null data", `{"event":"heartbeat","data":null}`, nil},
		{"array data", `{"event":"heartbeat","data":[]}`, nil},
		{"missing field", `{"event":"heartbeat","data":{}}`, nil},
		{"bool as string", `{"event":"hello","data":{"protocolVersion":1,"sessionId":"s","actorId":"a","clientId":"c","cursor":1,"latestCursor":1,"requiresSync":"true","timestamp":1}}`, nil},
		{"string as null", `{"event":"hello","data":{"protocolVersion":1,"sessionId":null,"actorId":"a","clientId":"c","cursor":1,"latestCursor":1,"requiresSync":true,"timestamp":1}}`, nil},
		{"wake", `{"event":"sync","data":{"cursor":64,"requiresPull":true,"reason":"catchup-required","timestamp":9}}`, Wake{Cursor: 64, Reason: WakeCatchupRequired, Timestamp: 9}},
		{"wake too large", `{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"delta-too-large","timestamp":9}}`, Wake{Cursor: 1, Reason: WakeDeltaTooLarge, Timestamp: 9}},
		{"wake reset", `{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"reset-required","timestamp":9}}`, Wake{Cursor: 1, Reason: WakeResetRequired, Timestamp: 9}},
		{"wake unknown reason", `{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"later","timestamp":9}}`, nil},
		{"wake requiresPull false", `{"event":"sync","data":{"cursor":1,"requiresPull":false,"reason":"reset-required","timestamp":9}}`, nil},
		{"wake requiresPull 1", `{"event":"sync","data":{"cursor":1,"requiresPull":1,"reason":"reset-required","timestamp":9}}`, nil},
		{"wake requiresPull missing", `{"event":"sync","data":{"cursor":1,"reason":"reset-required","timestamp":9}}`, nil},
		{"join", joinJSON, PresenceFanout{ScopeKey: "project:p1", Kind: PresenceJoin, ActorID: "actor-1", ClientID: "client-a", Doc: json.RawMessage(`{"cursor":42,"name":"Ada"}`), Timestamp: 1782993600000}},
		{"update compacts doc", fanout("update", `{ "a" : [ 1 , 2 ] }`), PresenceFanout{ScopeKey: "k:1", Kind: PresenceUpdate, ActorID: "a", ClientID: "c", Doc: json.RawMessage(`{"a":[1,2]}`), Timestamp: 7}},
		{"leave", fanout("leave", "null"), PresenceFanout{ScopeKey: "k:1", Kind: PresenceLeave, ActorID: "a", ClientID: "c", Timestamp: 7}},
		{"leave with doc", fanout("leave", "{}"), nil},
		{"join null doc", fanout("join", "null"), nil},
		{"join array doc", fanout("join", "[]"), nil},
		{"join scalar doc", fanout("join", `"x"`), nil},
		{"unknown kind", fanout("snapshot", "{}"), nil},
		{"leave without doc", `{"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","timestamp":7}}`, nil},
		{"fanout without timestamp", `{"event":"presence","data":{"scopeKey":"k","kind":"join","actorId":"a","clientId":"c","doc":{}}}`, nil},
		{"fanout without actor", `{"event":"presence","data":{"scopeKey":"k","kind":"join","clientId":"c","doc":{},"timestamp":1}}`, nil},
		{"empty scope key", `{"event":"presence","data":{"scopeKey":"","error":"presence.forbidden","timestamp":1}}`, nil},
		{"presence error", `{"event":"presence","data":{"scopeKey":"k","error":"presence.too_large","timestamp":1}}`, PresenceError{ScopeKey: "k", Code: PresenceTooLarge, Timestamp: 1}},
		{"presence error not string", `{"event":"presence","data":{"scopeKey":"k","error":null,"timestamp":1}}`, nil},
		{"publish shape from server", `{"event":"presence","data":{"scopeKey":"k","doc":{}}}`, nil},
		{"unknown event", `{ "event" : "future", "data" : 5 }`, UnknownEvent{Name: "future", Raw: json.RawMessage(`{"event":"future","data":5}`)}},
		{"unknown event without data", `{"event":"Hello"}`, UnknownEvent{Name: "Hello", Raw: json.RawMessage(`{"event":"Hello"}`)}},
		{"event key is case sensitive", `{"Event":"hello"}`, nil},
		{"event not string", `{"event":1}`, nil},
		{"type instead of event", `{"type":"ack","cursor":1}`, nil},
		{"array", `[]`, nil},
		{"null", `null`, nil},
		{"empty", ``, nil},
		{"trailing data", `{"event":"x"} {}`, nil},
		{"invalid utf-8", "{\"event\":\"\xff\"}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServerEvent([]byte(tt.in))
			if tt.want == nil {
				if code := ErrorCode(err); code != CodeInvalidRequest {
					t.Fatalf("got %#v, %v; want a %s decode error", got, err, CodeInvalidRequest)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseClientMessage(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want ClientMessage // nil: a *DecodeError with sync.invalid_request
	}{
		{"ack", `{"type":"ack","cursor":64}`, Ack{Cursor: 64}},
		{"ack integral decimal", `{"cursor":6.4e1,"type":"ack"}`, Ack{Cursor: 64}},
		{"ack fractional", `{"type":"ack","cursor":64.5}`, nil},
		{"ack string cursor", `{"type":"ack","cursor":"64"}`, nil},
		{"ack without cursor", `{"type":"ack"}`, nil},
		{"ack beyond safe", `{"type":"ack","cursor":-9007199254740992}`, nil},
		{"publish", `{"event":"presence","data":{"scopeKey":"project:p1","doc":{"cursor":42, "name":"Ada"}}}`, PresencePublish{ScopeKey: "project:p1", Doc: json.RawMessage(`{"cursor":42,"name":"Ada"}`)}},
		{"leave", `{"event":"presence","data":{"scopeKey":"project:p1","doc":null}}`, PresencePublish{ScopeKey: "project:p1"}},
		{"publish ignores kind", `{"event":"presence","data":{"scopeKey":"k","kind":"x","doc":{}}}`, PresencePublish{ScopeKey: "k", Doc: json.RawMessage(`{}`)}},
		{"scalar doc", `{"event":"presence","data":{"scopeKey":"k","doc":"online"}}`, nil},
		{"array doc", `{"event":"presence","data":{"scopeKey":"k","doc":[1]}}`, nil},
		{"missing doc", `{"event":"presence","data":{"scopeKey":"k"}}`, nil},
		{"empty scope key", `{"event":"presence","data":{"scopeKey":"","doc":null}}`, nil},
		{"numeric scope key", `{"event":"presence","data":{"scopeKey":1,"doc":null}}`, nil},
		{"missing data", `{"event":"presence"}`, nil},
		{"presence wins over ack", `{"type":"ack","cursor":1,"event":"presence","data":{"scopeKey":"k","doc":null}}`, PresencePublish{ScopeKey: "k"}},
		{"non-string event falls to ack", `{"event":5,"type":"ack","cursor":3}`, Ack{Cursor: 3}},
		{"unknown type", `{"type":"ping"}`, UnknownClientMessage{Key: "type", Name: "ping", Raw: json.RawMessage(`{"type":"ping"}`)}},
		{"unknown event", `{"event":"hello", "data":{}}`, UnknownClientMessage{Key: "event", Name: "hello", Raw: json.RawMessage(`{"event":"hello","data":{}}`)}},
		{"no discriminator", `{"cursor":1}`, nil},
		{"numeric type", `{"type":1}`, nil},
		{"not an object", `"ack"`, nil},
		{"not json", `{type:"ack"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClientMessage([]byte(tt.in))
			if tt.want == nil {
				if code := ErrorCode(err); code != CodeInvalidRequest {
					t.Fatalf("got %#v, %v; want a %s decode error", got, err, CodeInvalidRequest)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestAppendRealtime(t *testing.T) {
	tests := []struct {
		name string
		in   interface{ AppendJSON([]byte) []byte }
		want string
	}{
		{"hello", testHello(), helloJSON},
		{"wake", Wake{Cursor: 64, Reason: WakeResetRequired, Timestamp: 1}, `{"event":"sync","data":{"cursor":64,"requiresPull":true,"reason":"reset-required","timestamp":1}}`},
		{"heartbeat", Heartbeat{Timestamp: 30}, `{"event":"heartbeat","data":{"timestamp":30}}`},
		{"join", PresenceFanout{ScopeKey: "project:p1", Kind: PresenceJoin, ActorID: "actor-1", ClientID: "client-a", Doc: json.RawMessage(`{"cursor":42,"name":"Ada"}`), Timestamp: 1782993600000}, joinJSON},
		{"leave drops doc", PresenceFanout{ScopeKey: "k", Kind: PresenceLeave, ActorID: "a", ClientID: "c", Doc: json.RawMessage(`{}`), Timestamp: 2}, `{"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","doc":null,"timestamp":2}}`},
		{"presence error", PresenceError{ScopeKey: "k", Code: PresenceForbidden, Timestamp: 3}, `{"event":"presence","data":{"scopeKey":"k","error":"presence.forbidden","timestamp":3}}`},
		{"negative", Heartbeat{Timestamp: -1}, `{"event":"heartbeat","data":{"timestamp":-1}}`},
		{"string escapes", PresenceError{ScopeKey: "a\"\\\n\u2028<\x01\xff", Code: "x"}, `{"event":"presence","data":{"scopeKey":"a\"\\` + `\n` + "\u2028<" + `\u0001` + "\uFFFD" + `","error":"x","timestamp":0}}`},
		{"ack", Ack{Cursor: 9}, `{"type":"ack","cursor":9}`},
		{"publish", PresencePublish{ScopeKey: "k", Doc: json.RawMessage(`{"a":1}`)}, `{"event":"presence","data":{"scopeKey":"k","doc":{"a":1}}}`},
		{"publish leave", PresencePublish{ScopeKey: "k"}, `{"event":"presence","data":{"scopeKey":"k","doc":null}}`},
		{"unknown event", UnknownEvent{Name: "x", Raw: json.RawMessage(`{"event":"x"}`)}, `{"event":"x"}`},
		{"unknown message", UnknownClientMessage{Key: "type", Name: "x", Raw: json.RawMessage(`{"type":"x"}`)}, `{"type":"x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(tt.in.AppendJSON([]byte("prefix")))
			if want := "prefix" + tt.want; got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			m, ok := tt.in.(json.Marshaler)
			if !ok {
				t.Fatal("not a json.Marshaler")
			}
			if b, err := m.MarshalJSON(); err != nil || string(b) != tt.want {
				t.Errorf("MarshalJSON = %s, %v; want %s", b, err, tt.want)
			}
		})
	}
}

func TestMarshalRealtimeRefuses(t *testing.T) {
	tests := []struct {
		name string
		in   json.Marshaler
	}{
		{"hello cursor", Hello{Cursor: MaxSafeInteger + 1}},
		{"hello timestamp", Hello{Timestamp: -MaxSafeInteger - 1}},
		{"wake reason", Wake{}},
		{"wake cursor", Wake{Reason: WakeDeltaTooLarge, Cursor: 1 << 60}},
		{"heartbeat", Heartbeat{Timestamp: 1 << 62}},
		{"fanout empty key", PresenceFanout{Kind: PresenceLeave}},
		{"fanout kind", PresenceFanout{ScopeKey: "k", Doc: json.RawMessage(`{}`)}},
		{"fanout join without doc", PresenceFanout{ScopeKey: "k", Kind: PresenceJoin}},
		{"fanout update array doc", PresenceFanout{ScopeKey: "k", Kind: PresenceUpdate, Doc: json.RawMessage(`[]`)}},
		{"presence error key", PresenceError{Code: PresenceForbidden}},
		{"ack", Ack{Cursor: -(1 << 53)}},
		{"publish key", PresencePublish{Doc: json.RawMessage(`{}`)}},
		{"publish broken doc", PresencePublish{ScopeKey: "k", Doc: json.RawMessage(`{"a":}`)}},
		{"unknown raw", UnknownEvent{Name: "x", Raw: json.RawMessage(`[]`)}},
		{"unknown message raw", UnknownClientMessage{Key: "type", Name: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := tt.in.MarshalJSON(); err == nil {
				t.Errorf("MarshalJSON = %s, want an error", b)
			}
		})
	}
}

func TestRealtimeEnumNames(t *testing.T) {
	for _, r := range []WakeReason{WakeDeltaTooLarge, WakeCatchupRequired, WakeResetRequired} {
		if got, ok := ParseWakeReason(r.String()); !ok || got != r {
			t.Errorf("ParseWakeReason(%q) = %v, %v", r.String(), got, ok)
		}
	}
	for _, k := range []PresenceKind{PresenceJoin, PresenceUpdate, PresenceLeave} {
		if got, ok := ParsePresenceKind(k.String()); !ok || got != k {
			t.Errorf("ParsePresenceKind(%q) = %v, %v", k.String(), got, ok)
		}
	}
	if _, ok := ParseWakeReason(""); ok {
		t.Error(`ParseWakeReason("") succeeded`)
	}
	if _, ok := ParsePresenceKind("snapshot"); ok {
		t.Error(`ParsePresenceKind("snapshot") succeeded`)
	}
}

func TestAppendRealtimeAllocs(t *testing.T) {
	buf := make([]byte, 0, 512)
	fan := PresenceFanout{ScopeKey: "project:p1", Kind: PresenceUpdate, ActorID: "a", ClientID: "c", Doc: json.RawMessage(`{"x":1}`), Timestamp: 1}
	events := []ServerEvent{testHello(), Wake{Cursor: 1, Reason: WakeCatchupRequired, Timestamp: 2}, Heartbeat{Timestamp: 3}, fan}
	for _, ev := range events {
		if n := testing.AllocsPerRun(100, func() { buf = AppendServerEvent(buf[:0], ev) }); n != 0 {
			t.Errorf("%s: %v allocations per AppendServerEvent, want 0", ev.EventName(), n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { buf = testHello().AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("Hello.AppendJSON: %v allocations, want 0", n)
	}
}

func TestRealtimeJSONMarshal(t *testing.T) {
	got, err := json.Marshal(struct {
		E ServerEvent
		M ClientMessage
	}{Heartbeat{Timestamp: 1}, Ack{Cursor: 2}})
	want := `{"E":{"event":"heartbeat","data":{"timestamp":1}},"M":{"type":"ack","cursor":2}}`
	if err != nil || string(got) != want {
		t.Errorf("json.Marshal = %s, %v; want %s", got, err, want)
	}
}
