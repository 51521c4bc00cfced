--- Answers 0 (ends the script) unless {{owner}} is the exclusive holder whose value {{holder}}
--- (a GET's string, or false) is: the owner alone, "\0" and the owner (a hand-over's mark),
--- or either followed by "\0" and the hold's metadata.

if {{holder}} ~= {{owner}} and {{holder}} ~= "\0" .. {{owner}} then
  -- the owner followed by its metadata
  local o = {{owner}} .. "\0"
  if not {{holder}} or (string.sub({{holder}}, 1, #o) ~= o and string.sub({{holder}}, 1, #o + 1) ~= "\0" .. o) then
    return 0
  end
end
