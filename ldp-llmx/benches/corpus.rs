//! The spec's examples (llmx-v1.md sections 3, 5, 7 and 8) grouped into whole messages, as agents would send them.

/// (name, LLMX text) for each message.
pub const MESSAGES: &[(&str, &str)] = &[
    (
        "6.2 delegation: HEADER+CTX+REQ+PLAN",
        r#"HEADER:{f:Claude,t:Gemini,s:1}
CTX:{p:myapp,f:["src/api.ts","src/db.ts"],st:{phase:"P1",env:"dev"},issue:"PROJ-123"}
REQ:{o:"implement user authentication",pr:2,d:["PROJ-100"],exp:["SECURITY-EXPERT"]}
PLAN:[(i:1,t:"analyze requirements",s:C),(i:2,t:"implement core",s:I),(i:3,t:"write tests",s:P)]
"#,
    ),
    (
        "5.1 batch request: 3 ACT",
        r#"HEADER:{f:Claude,t:ALL,s:1,b:B1}
ACT:{i:A1,op:read,tgt:"p:file1.ts"}
ACT:{i:A2,op:read,tgt:"p:file2.ts"}
ACT:{i:A3,op:search,tgt:"p:src/",args:{q:"TODO"}}
"#,
    ),
    (
        "5.2 batch response: 3 OBS",
        r#"HEADER:{f:Gemini,t:Claude,s:2,b:B1}
OBS:{ai:A1,s:OK,c:{lines:100}}
OBS:{ai:A3,s:OK,c:{matches:5}}
OBS:{ai:A2,s:OK,c:{lines:50}}
"#,
    ),
    (
        "3.5/3.6 act and observe",
        r#"HEADER:{f:Gemini,t:Claude,s:3}
ACT:{i:A1,op:edit,tgt:"p:src/auth.ts#L42",args:{action:"add validation"}}
OBS:{ai:A1,s:OK,c:{lines:45,modified:true}}
"#,
    ),
    (
        "3.6 failed observation",
        r#"HEADER:{f:Gemini,t:Claude,s:4}
OBS:{ai:A2,s:ERR,e:"file not found: src/missing.ts"}
"#,
    ),
    (
        "6.3 blocker: BLK+ASK",
        r#"HEADER:{f:Gemini,t:Claude,s:5}
BLK:{w:"missing API credentials",a:["use mock","wait for config","skip feature"],esc:true}
ASK:{q:"which auth method?",o:["JWT","session","OAuth2"],def:"JWT"}
"#,
    ),
    (
        "3.9 handoff: END",
        r#"HEADER:{f:Gemini,t:Claude,s:6}
END:{n:"security review",t:["npm test","npm run lint"],r:["needs load testing"],del:["src/auth.ts","src/auth.test.ts"]}
"#,
    ),
    (
        "8.2 request with custom fields",
        r#"HEADER:{f:Claude,t:Gemini,s:7}
REQ:{o:"task",pr:2,x_team:"frontend",x_deadline:"2024-01-15"}
"#,
    ),
    (
        "3.10 response",
        r#"HEADER:{f:Claude,t:Gemini,s:8}
RES:{o:"JWT",msg:"will use RS256 signing"}
"#,
    ),
];
